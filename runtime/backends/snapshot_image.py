"""What a backend reads from the snapshot image it loads from: the seam to snapshotter's restore.

`snapshotter.RestoredImage` implements these Protocols: mypy checks it where runtime.models.manager
returns the snapshotter's `ImageLoader` as a `runtime.models.snapshot_restore.ImageSource`, whose
`restore` returns a `SnapshotImage`. Backends depend on this surface only, never on the
snapshotter's classes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

__all__ = ["ImageIdentity", "ImageManifest", "SnapshotImage"]


class ImageIdentity(Protocol):
    """Which model version, built for which target (`cpu`, `cuda:sm_90`, ...)."""

    @property
    def model(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def target(self) -> str: ...


class ImageManifest(ImageIdentity, Protocol):
    """The parts of an image's manifest the runtime reads."""

    @property
    def source_digest(self) -> str:
        """Digest of the model files the image was built from (runtime compares it)."""
        ...

    @property
    def framework_versions(self) -> Mapping[str, str]:
        """Framework and host versions the image was built with (`onnxruntime`, `torch`, ...)."""
        ...

    @property
    def weight_bytes(self) -> int:
        """Bytes of the image's tensors (what a framework copies onto a GPU from a host image)."""
        ...


class SnapshotImage(Protocol):
    """One restored image: weights as views into one arena, plus its artifacts."""

    @property
    def ref(self) -> ImageIdentity: ...

    @property
    def manifest(self) -> ImageManifest: ...

    @property
    def tensors(self) -> Mapping[str, np.ndarray]:
        """Host views named by the model's weight names (bfloat16 as uint16; empty after a
        restore to a CUDA device: use `torch_tensors`)."""
        ...

    @property
    def timings(self) -> Mapping[str, float]:
        """Restore phases in seconds: "fetch", "read", "verify", "total"."""
        ...

    @property
    def source(self) -> str:
        """Where the bytes came from: "host", "cache" or "store"."""
        ...

    @property
    def device(self) -> str:
        """Where the weights were restored: "cpu" (host views in `tensors`) or "cuda:N"
        (`torch_tensors()` are views of that GPU's memory; `tensors` is empty)."""
        ...

    def torch_tensors(self) -> Mapping[str, Any]:
        """Zero-copy `torch.Tensor` views of the same memory, with the manifest's dtypes."""
        ...

    def onnx_graph(self) -> tuple[bytes | None, bool]:
        """The weightless ONNX graph for this host, and whether it is already optimized."""
        ...

    def artifact(self, name: str) -> bytes | None:
        """A portable artifact's bytes (`onnx_graph`, `torchscript_weightless`, ...), or None."""
        ...

    def keyed_artifact(self, name: str, here: Mapping[str, str]) -> bytes | None:
        """A compiled artifact's bytes if it was built for `here`, else None (logged why)."""
        ...

    def unpack(self, name: str) -> Path:
        """Archive artifact `name` unpacked (checked) into a directory; that directory."""
        ...
