"""The config `parameters` Triton's libtorch backend reads that Thaw's torch backend honours.

    INFERENCE_MODE   "true" (the default) runs `forward` under `torch.inference_mode()`,
                     "false" under `torch.no_grad()` only (a model whose ops refuse inference
                     tensors); each load logs Triton's "Inference Mode is enabled|disabled for
                     model instance 'M'" line
    ENABLE_WEIGHT_SHARING  "true": the instances of a version on one device share one
                     TorchScript module (loaded once; each other instance logs Triton's
                     "Reusing TorchScript model for instance 'I'"); default false

Values are read as Triton's `ParseBoolValue` reads them (true/yes/1/on, false/no/0/off, any
case); another value refuses the load in its words.
"""

from __future__ import annotations

from runtime.errors import RepositoryError
from tritonconfig.schema import mc

__all__ = [
    "INFERENCE_MODE_PARAMETER",
    "WEIGHT_SHARING_PARAMETER",
    "inference_mode",
    "weight_sharing",
]

INFERENCE_MODE_PARAMETER = "INFERENCE_MODE"
WEIGHT_SHARING_PARAMETER = "ENABLE_WEIGHT_SHARING"
_TRUE = frozenset({"true", "yes", "1", "on"})
_FALSE = frozenset({"false", "no", "0", "off"})


def _bool_parameter(config: mc.ModelConfig, key: str, *, default: bool) -> bool:
    if key not in config.parameters:
        return default
    value = config.parameters[key].string_value
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise RepositoryError(f"failed to convert '{value}' to boolean value")


def inference_mode(config: mc.ModelConfig) -> bool:
    """Whether `forward` runs under `torch.inference_mode()` (module docstring)."""
    return _bool_parameter(config, INFERENCE_MODE_PARAMETER, default=True)


def weight_sharing(config: mc.ModelConfig) -> bool:
    """Whether a version's instances on one device share one module (module docstring)."""
    return _bool_parameter(config, WEIGHT_SHARING_PARAMETER, default=False)
