"""The config `parameters` Triton's libtorch backend reads that Thaw's torch backend honours.

    INFERENCE_MODE   "true" (the default) runs `forward` under `torch.inference_mode()`,
                     "false" under `torch.no_grad()` only (a model whose ops refuse inference
                     tensors); each load logs Triton's "Inference Mode is enabled|disabled for
                     model instance 'M'" line
    ENABLE_WEIGHT_SHARING  "true": the instances of a version on one device share one
                     TorchScript module (loaded once; each other instance logs Triton's
                     "Reusing TorchScript model for instance 'I'"); default false
    DISABLE_OPTIMIZED_EXECUTION  "true": TorchScript's graph executor runs without its
                     optimizations (`torch.jit` profiles and optimizes a model over its first
                     calls, which can make them very slow); default false
    DISABLE_CUDNN    "true": cuDNN off while the model runs; default false
    ENABLE_CACHE_CLEANING  "true": CUDA's cached memory released after each execution of a
                     model on a GPU; default false
    ENABLE_JIT_PROFILING, ENABLE_JIT_EXECUTOR, ENABLE_TENSOR_FUSER  TorchScript's profiling
                     mode, profiling executor and tensor-expression fuser, set as given while
                     the model runs (left as torch has them when not given)
    INTRA_OP_THREAD_COUNT, INTER_OP_THREAD_COUNT  torch's intra-op and inter-op thread pools
                     (process-wide, as in Triton; a count above 0 is set at the load)

As Triton's libtorch backend, the settings apply around each execution, on the thread that
runs it (TorchScript's executor switches are per thread), and the load logs Triton's lines
for them (`TorchSettings.log_lines`).

Values are read as Triton's `ParseBoolValue` reads them (true/yes/1/on, false/no/0/off, any
case); another value refuses the load in its words.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonconfig.model_parameters import optional_bool, optional_int
from tritonconfig.schema import mc

__all__ = [
    "INFERENCE_MODE_PARAMETER",
    "WEIGHT_SHARING_PARAMETER",
    "TorchSettings",
    "inference_mode",
    "torch_settings",
    "weight_sharing",
]

INFERENCE_MODE_PARAMETER = "INFERENCE_MODE"
WEIGHT_SHARING_PARAMETER = "ENABLE_WEIGHT_SHARING"


def _bool_parameter(config: mc.ModelConfig, key: str, *, default: bool) -> bool:
    value = optional_bool(config, key)
    return default if value is None else value


def inference_mode(config: mc.ModelConfig) -> bool:
    """Whether `forward` runs under `torch.inference_mode()` (module docstring)."""
    return _bool_parameter(config, INFERENCE_MODE_PARAMETER, default=True)


def weight_sharing(config: mc.ModelConfig) -> bool:
    """Whether a version's instances on one device share one module (module docstring)."""
    return _bool_parameter(config, WEIGHT_SHARING_PARAMETER, default=False)


@dataclass(frozen=True)
class TorchSettings:
    """The libtorch backend's execution settings of one model (module docstring)."""

    optimized_execution: bool = True
    cudnn: bool = True
    cache_cleaning: bool = False
    jit_profiling: bool | None = None
    jit_executor: bool | None = None
    tensor_fuser: bool | None = None
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None

    def log_lines(self, instance: str) -> list[str]:
        """Triton's load lines for these settings, for model instance `instance`."""

        def said(flag: bool) -> str:
            return "enabled" if flag else "disabled"

        lines = [
            f"Optimized execution is {said(self.optimized_execution)} for model instance "
            f"'{instance}'",
            f"Cache Cleaning is {said(self.cache_cleaning)} for model instance '{instance}'",
            f"cuDNN is {said(self.cudnn)} for model instance '{instance}'",
        ]
        for what, flag in (("Tensor fuser", self.tensor_fuser),
                           ("Jit profiling", self.jit_profiling),
                           ("Jit executor", self.jit_executor)):  # fmt: skip
            if flag is not None:
                lines.append(f"{what} is {said(flag)} for model instance '{instance}'")
        for what, count in (("Intra", self.intra_op_threads), ("Inter", self.inter_op_threads)):
            if count is not None and count > 0:
                lines.append(f"{what} op thread count is set to {count} for model instance "
                             f"'{instance}'")  # fmt: skip
        return lines


def torch_settings(config: mc.ModelConfig) -> TorchSettings:
    """The model's TorchSettings from its config's parameters; ModelConfigError for a value
    Triton would refuse."""
    return TorchSettings(
        optimized_execution=not _bool_parameter(config, "DISABLE_OPTIMIZED_EXECUTION",
                                                default=False),
        cudnn=not _bool_parameter(config, "DISABLE_CUDNN", default=False),
        cache_cleaning=_bool_parameter(config, "ENABLE_CACHE_CLEANING", default=False),
        jit_profiling=optional_bool(config, "ENABLE_JIT_PROFILING"),
        jit_executor=optional_bool(config, "ENABLE_JIT_EXECUTOR"),
        tensor_fuser=optional_bool(config, "ENABLE_TENSOR_FUSER"),
        intra_op_threads=optional_int(config, "INTRA_OP_THREAD_COUNT"),
        inter_op_threads=optional_int(config, "INTER_OP_THREAD_COUNT"),
    )  # fmt: skip
