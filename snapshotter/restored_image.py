"""`RestoredImage`: the weights of one image as views into one arena, plus its artifacts."""

from __future__ import annotations

import functools
import hashlib
import logging
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from snapshotter.arena import Arena
from snapshotter.artifact_archive import unpack_archive
from snapshotter.artifact_key import key_mismatch
from snapshotter.image_ref import ImageRef
from snapshotter.manifest import Manifest

logger = logging.getLogger(__name__)


@functools.cache
def process_unpack_root() -> Path:
    """Where archives unpack when the loader gave no root: one private directory per process."""
    return Path(tempfile.mkdtemp(prefix="thaw-artifacts-"))


@dataclass
class RestoredImage:
    """What a restore hands the runtime. `tensors` are numpy views into `arena` named by the
    model's weight names (bfloat16 weights appear as uint16; `torch_tensors()` reinterprets
    them); `timings` holds phase durations in seconds ("fetch", "read", "verify", "total").
    After a restore to a CUDA `device`, `tensors` is empty and `torch_tensors()` returns views
    into one device arena (`arena` is then an empty host arena).

    `unpack_root` is where `unpack` puts archive artifacts (compile and engine caches): the
    loader sets it under the node cache; without one, a private temporary directory.
    `files_dir` is where the restore wrote the checkpoint's model files (tokenizer, configs,
    shard index: `Manifest.files`), each checked against its digest; None when it has none."""

    ref: ImageRef
    manifest: Manifest
    arena: Arena
    tensors: dict[str, np.ndarray]
    artifacts: dict[str, bytes]
    timings: dict[str, float]
    source: str = "store"
    device: str = "cpu"
    _torch: dict[str, Any] | None = field(default=None, repr=False)
    unpack_root: Path | None = None
    files_dir: Path | None = None

    def artifact(self, name: str) -> bytes | None:
        """An artifact's bytes (`onnx_graph`, `onnx_graph_ort`, `torchscript_weightless`,
        `export_weightless`; compiled ones through `keyed_artifact`), or None."""
        return self.artifacts.get(name)

    def keyed_artifact(self, name: str, here: Mapping[str, str]) -> bytes | None:
        """A compiled artifact's bytes if the image has it and it was built for `here` (target,
        framework versions, settings: see `artifact_key`), else None, with a log line saying
        why: the caller then does what a start without an image does."""
        data, built = self.artifacts.get(name), self.manifest.artifact_keys.get(name)
        reason = (
            "the image has none"
            if data is None
            else "the image records no key for it"
            if built is None
            else key_mismatch(built, here)
        )
        if reason is None:
            return data
        logger.info(
            "model=%s version=%s image artifact %s not used: %s",
            self.ref.model, self.ref.version, name, reason,
        )  # fmt: skip
        return None

    def unpack(self, name: str) -> Path:
        """Unpack archive artifact `name` into `<unpack_root>/<its digest>` (checked: nothing
        lands outside it) and return that directory. Raises KeyError if there is no such
        artifact, `ArtifactError` if the archive is malformed or hostile."""
        data = self.artifacts[name]
        entry = self.manifest.artifacts.get(name)
        digest = entry.digest if entry is not None else hashlib.sha256(data).hexdigest()
        return unpack_archive(data, self.unpack_root or process_unpack_root(), digest)

    def onnx_graph(self) -> tuple[bytes | None, bool]:
        """The weightless ONNX graph for onnxruntime on this host, and whether it is already
        optimized (then create the session with `ORT_DISABLE_ALL`, CPU provider only).

        A host-optimized image (`onnx_graph_ort`) built for another onnxruntime version or CPU
        gives `(None, False)`: its tensors are the optimized ones, so load the model file.
        """
        from snapshotter.sources.ort_optimize import ARTIFACT, VERSION_KEY, host_key

        optimized = self.artifacts.get(ARTIFACT)
        if optimized is None:
            return self.artifacts.get("onnx_graph"), False
        if self.manifest.framework_versions.get(VERSION_KEY) != host_key():
            return None, False
        return optimized, True

    def torch_tensors(self) -> dict[str, Any]:
        """Zero-copy `torch.Tensor` views of the same memory, with the manifest's dtypes."""
        if self._torch is None:
            import torch

            out = {}
            for entry in self.manifest.tensors:
                tensor = torch.from_numpy(self.tensors[entry.name])
                if entry.dtype == "bfloat16":
                    tensor = tensor.view(torch.bfloat16)
                out[entry.name] = tensor
            self._torch = out
        return self._torch
