"""`RestoredImage`: the weights of one image as views into one arena, plus its artifacts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from snapshotter.arena import Arena
from snapshotter.image_ref import ImageRef
from snapshotter.manifest import Manifest


@dataclass
class RestoredImage:
    """What a restore hands the runtime. `tensors` are numpy views into `arena` named by the
    model's weight names (bfloat16 weights appear as uint16; `torch_tensors()` reinterprets
    them); `timings` holds phase durations in seconds ("fetch", "read", "verify", "total").
    After a restore to a CUDA `device`, `tensors` is empty and `torch_tensors()` returns views
    into one device arena (`arena` is then an empty host arena)."""

    ref: ImageRef
    manifest: Manifest
    arena: Arena
    tensors: dict[str, np.ndarray]
    artifacts: dict[str, bytes]
    timings: dict[str, float]
    source: str = "store"
    device: str = "cpu"
    _torch: dict[str, Any] | None = field(default=None, repr=False)

    def artifact(self, name: str) -> bytes | None:
        """An artifact's bytes (`onnx_graph`, `onnx_graph_ort`, `torchscript_weightless`), or
        None."""
        return self.artifacts.get(name)

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
