"""`SharedSettings`: the budgets and graces of shared placement (`thaw.placement` shared),
the same for both scaler backends (the local one's processes, the Kubernetes one's pods)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SharedSettings"]


@dataclass(frozen=True)
class SharedSettings:
    """Replicas shared by `thaw.placement` shared models (activator.scaler.placement); sizes
    in bytes, times in seconds."""

    # One shared runtime's budget: the images of the models it holds plus their overhead
    # (`--shared-replica-bytes`); a model larger than this gets a runtime of its own size.
    budget_bytes: int = 2 << 30
    # What a loaded model costs besides its image (`--shared-model-overhead-bytes`): sessions,
    # buffers, bookkeeping. Measured per model beyond its weights (docs/density.md): ~1.6 MiB
    # for a small ONNX model, ~40 MiB for resnet50 (onnxruntime's activation arena).
    model_overhead_bytes: int = 24 << 20
    # A shared model with no request for this long (and nothing in flight or held) may be
    # evicted to make room (`--evict-grace-s`).
    evict_grace_s: float = 2.0
    # A shared runtime whose models all went to zero is stopped after this long
    # (`--shared-release-grace-s`); the host tier keeps their images.
    release_grace_s: float = 10.0
