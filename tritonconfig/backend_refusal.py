"""What a model's backend refuses at its load that the config alone says: a TorchScript model's
datatypes PyTorch has no tensor of, or a TYPE_STRING input of more than one dimension
(torch_datatypes); a `TORCH_COMPILE_OPTIONAL_PARAMETERS` it cannot read (torch_compile); a
backend parameter its backend cannot read (a boolean or a count not spelled as one, an
onnxruntime `execution_mode` but 0 or 1: model_parameters, ort_session_options,
torch_parameters). The replica's load refuses these in
these words; `thaw up` judges them at its read of the repository with the same code, so a
model at zero is unavailable from the start, not at its first wake.

    backend_refusal(config, "m")   -> "failed to convert 'maybe' to boolean value" | None
"""

from __future__ import annotations

from tritonconfig.errors import ModelConfigError
from tritonconfig.ort_session_options import ort_settings
from tritonconfig.schema import mc
from tritonconfig.torch_compile import compile_settings
from tritonconfig.torch_datatypes import string_io_refusal, unsupported_datatype
from tritonconfig.torch_parameters import inference_mode, torch_settings, weight_sharing

__all__ = ["backend_refusal"]


def backend_refusal(config: mc.ModelConfig, model: str) -> str | None:
    """Triton's words for the first thing of `config` its backend's load refuses, in the order
    the load meets them, else None."""
    try:
        if config.backend == "onnxruntime":
            ort_settings(config, 1)
        elif config.backend == "pytorch":
            refused = string_io_refusal(config)
            if refused is not None:
                return refused
            try:
                compile_settings(config)
            except ModelConfigError as exc:
                return f"model '{model}': {exc}"
            refused = unsupported_datatype(config, model)
            if refused is not None:
                return refused
            inference_mode(config)
            torch_settings(config)
            weight_sharing(config)
    except ModelConfigError as exc:
        return exc.message
    return None
