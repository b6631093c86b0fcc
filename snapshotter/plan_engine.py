"""`tensorrt_plan` models: the plan is an image artifact keyed by the GPU and TensorRT it runs on.

A plan (`model.plan`) is a serialized TensorRT engine: it has no weights to lay out (they are
inside the engine) and it deserializes only on the GPU architecture and TensorRT version it was
built for. A `cuda:sm_NN` image of a plan model carries it as artifact `tensorrt_engine`, keyed
by `engine_key` (target, TensorRT, model digest; `precision` is "plan": whatever it was built
at), checked at build time by deserializing it on that GPU. The runtime's TensorRT backend takes
the plan from the image when the key matches this host, else reads `model.plan` (logged why).
"""

from __future__ import annotations

from typing import Any

from snapshotter.artifact_key import short
from snapshotter.engine_key import engine_key

__all__ = ["ARTIFACT", "plan_from_image", "plan_key", "tensorrt_module_version"]

ARTIFACT = "tensorrt_engine"
PLAN_PRECISION = "plan"


def plan_key(target: str, *, tensorrt: str | None, model_digest: str) -> dict[str, str]:
    """The key of a plan built for `target` with TensorRT `tensorrt`, from `model_digest`."""
    return engine_key(
        target=target, tensorrt=tensorrt, onnxruntime=None, model_digest=model_digest,
        options={}, precision=PLAN_PRECISION,
    )  # fmt: skip


def tensorrt_module_version() -> str | None:
    """The `tensorrt` Python package's version (what deserializes plans), or None."""
    try:
        import tensorrt
    except ImportError:
        return None
    return short(tensorrt.__version__)


def plan_from_image(image: Any, *, device_id: int, target: str | None = None) -> bytes | None:
    """The image's plan when it was built for this GPU (`target`, default: that of `device_id`)
    and this TensorRT; None (logged why by `keyed_artifact`) otherwise."""
    if target is None:
        from snapshotter.compile_cache import device_target

        target = device_target(f"cuda:{device_id}")
    here = plan_key(
        target, tensorrt=tensorrt_module_version(), model_digest=image.manifest.source_digest
    )
    data: bytes | None = image.keyed_artifact(ARTIFACT, here)
    return data
