"""What a compiled GPU engine is valid for: its cache key, from values passed in (pure).

A TensorRT engine (built by onnxruntime's TensorRT EP, or a `tensorrt_plan` model's plan) runs
only on the GPU architecture it was built for, with the TensorRT (and, through the EP, the
onnxruntime) it was built with, at the precision it was built at, for the model it was built
from. The key records each as a field, so `artifact_key.key_mismatch` can say which one
differs:

    target        cuda:sm_90                      (compute capability)
    tensorrt      10.9.0 | libnvinfer-100900 | none
    onnxruntime   1.22.0 | none                   (none: a plan, loaded by TensorRT itself)
    precision     fp32 | fp16 | bf16 | int8 | fp8 (the widest reduced precision enabled)
    model         the image's source digest       (the files the engine was built from)
    options       digest of the options that shape an engine (workspace, profiles, ...)

Versions are read by the callers (`trt_cache`, `plan_engine`), not here, so tests can pass any.
"""

from __future__ import annotations

from collections.abc import Mapping

from snapshotter.artifact_key import settings_digest, short

__all__ = ["engine_key", "precision_of"]

# TensorRT EP precision flags, lowest precision first: the first one enabled names the engine.
_PRECISION_FLAGS = (
    ("trt_fp8_enable", "fp8"),
    ("trt_int8_enable", "int8"),
    ("trt_fp16_enable", "fp16"),
    ("trt_bf16_enable", "bf16"),
)


def precision_of(options: Mapping[str, str]) -> str:
    """The reduced precision a TensorRT EP's options enable (`fp32` when none is)."""
    for flag, name in _PRECISION_FLAGS:
        if str(options.get(flag, "")).lower() in ("true", "1"):
            return name
    return "fp32"


def engine_key(
    *,
    target: str,
    tensorrt: str | None,
    onnxruntime: str | None,
    model_digest: str,
    options: Mapping[str, str],
    precision: str | None = None,
) -> dict[str, str]:
    """The key fields above; `precision` defaults to `precision_of(options)`."""
    return {
        "target": short(target),
        "tensorrt": short(tensorrt or "none"),
        "onnxruntime": short(onnxruntime or "none"),
        "precision": precision or precision_of(options),
        "model": short(model_digest),
        "options": settings_digest(dict(options)),
    }
