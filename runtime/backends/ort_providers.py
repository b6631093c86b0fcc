"""onnxruntime execution providers for one instance: what it asks for, and what the session got.

    plan (KIND_GPU on cuda:N) ─▶ wanted: [TensorRT EP?, CUDA EP (cuDNN search set), CPU EP]
    InferenceSession(...) ─▶ disable_fallback(): an EP error at `run` fails that request, it
        │                    never moves the session to the CPU for good
    get_providers() vs wanted:
        ├─ first is the one planned ─────────────────────────▶ ok
        ├─ TensorRT planned, the CUDA EP first ──────────────▶ runs on CUDA: a counted fallback
        │                                                      (`tensorrt_ep_failed`), logged
        └─ a GPU planned, no GPU EP in the session ──────────▶ the load fails, saying so

onnxruntime's Python wrapper retries a session whose EP failed at creation with its fallback
providers (printing to stdout) and has no switch to stop that before creation; so the providers
are checked right after it, against the plan, and a GPU instance can never quietly become a
CPU one. Per-node placement (a node the CUDA EP has no kernel for runs on the CPU EP) is
onnxruntime's normal partitioning and is not a fallback.

cuDNN's convolution algorithm search: the CUDA EP's default is EXHAUSTIVE, which benchmarks
every algorithm at the first inference of each conv shape (seconds for a large conv net: a
cold start's first request would pay it). Triton's `cudnn_conv_algo_search` parameter (0
EXHAUSTIVE, 1 HEURISTIC, 2 DEFAULT, or those names) is honoured; without it Thaw uses
HEURISTIC, the fast choice for a cold start.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from runtime.backends.base import LoadContext
from runtime.devices.plan import FallbackReason
from runtime.errors import RepositoryError
from tritonconfig import ModelConfigError, tensorrt_parameters

__all__ = [
    "CONV_ALGO_PARAMETER",
    "ProviderCheck",
    "check_providers",
    "conv_algo_search",
    "wanted_providers",
]

logger = logging.getLogger(__name__)

CPU_EP, CUDA_EP, TRT_EP = (
    "CPUExecutionProvider",
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
)
CONV_ALGO_PARAMETER = "cudnn_conv_algo_search"
_CONV_ALGOS = {"0": "EXHAUSTIVE", "1": "HEURISTIC", "2": "DEFAULT"}
DEFAULT_CONV_ALGO = "HEURISTIC"


def conv_algo_search(ctx: LoadContext) -> str:
    """The CUDA EP's `cudnn_conv_algo_search` for this model (see the module docstring)."""
    params = ctx.config.parameters
    if CONV_ALGO_PARAMETER not in params:
        return DEFAULT_CONV_ALGO
    raw = params[CONV_ALGO_PARAMETER].string_value.strip().upper()
    value = _CONV_ALGOS.get(raw, raw)
    if value not in _CONV_ALGOS.values():
        raise RepositoryError(
            f"model '{ctx.model_name}': parameter `{CONV_ALGO_PARAMETER}` = {raw!r}, must be "
            "one of 0 (EXHAUSTIVE), 1 (HEURISTIC), 2 (DEFAULT)"
        )
    return value


def wanted_providers(ctx: LoadContext, available: list[str]) -> list[Any]:
    """The providers (with options) the session is created with, first the one planned."""
    if ctx.instance_kind != "KIND_GPU":
        return [CPU_EP]
    wanted: list[Any] = []
    params = tensorrt_parameters(ctx.config)
    if params is not None and TRT_EP in available:
        wanted.append((TRT_EP, _tensorrt_options(ctx, params)))
    elif params is not None:
        logger.warning("model=%s asks for the tensorrt accelerator but onnxruntime has no "
                       "%s; running on CUDA", ctx.model_name, TRT_EP)  # fmt: skip
    if CUDA_EP not in available:
        raise RepositoryError(
            f"model '{ctx.model_name}' asks for KIND_GPU but onnxruntime has no {CUDA_EP} "
            "(install onnxruntime-gpu, and not the CPU onnxruntime beside it)"
        )
    cuda = {"device_id": str(ctx.device_id), "cudnn_conv_algo_search": conv_algo_search(ctx)}
    wanted.append((CUDA_EP, cuda))
    wanted.append(CPU_EP)
    return wanted


def _tensorrt_options(ctx: LoadContext, params: dict[str, str]) -> dict[str, str]:
    """TensorRT EP options from the accelerator's Triton parameters (with the image's engine
    and timing caches when they were built for this GPU, TensorRT and onnxruntime)."""
    from snapshotter import trt_session_options

    try:
        return trt_session_options(params, device_id=ctx.device_id, image=ctx.image)
    except ModelConfigError as exc:
        raise RepositoryError(f"model '{ctx.model_name}': {exc}") from None


@dataclass(frozen=True)
class ProviderCheck:
    """What the session's providers mean: `fallback` (a metric reason) and its message when
    it runs on a lesser GPU provider than planned; None when it is as planned."""

    fallback: str | None = None
    message: str = ""


def check_providers(model: str, wanted: list[Any], actual: list[str]) -> ProviderCheck:
    """Compare the session's `get_providers()` with the `wanted` list it was created with;
    RepositoryError when a GPU instance got no GPU provider (see the module docstring)."""
    names = [w[0] if isinstance(w, tuple) else w for w in wanted]
    planned = names[0]
    if actual and actual[0] == planned:
        return ProviderCheck()
    if planned == CPU_EP:
        raise RepositoryError(f"model '{model}': onnxruntime runs it on {actual}, not the CPU")
    if planned == TRT_EP and actual and actual[0] == CUDA_EP:
        return ProviderCheck(
            FallbackReason.TENSORRT_EP_FAILED.value,
            f"onnxruntime did not enable {TRT_EP} (it failed when the session was created; "
            f"see onnxruntime's log); running on {CUDA_EP}",
        )
    raise RepositoryError(
        f"model '{model}': onnxruntime did not enable {planned} (the session has {actual}): "
        "the execution provider failed when the session was created (a CUDA, cuDNN or "
        "TensorRT library missing or of another version?); the instance would have run on "
        "the CPU, so the load fails"
    )
