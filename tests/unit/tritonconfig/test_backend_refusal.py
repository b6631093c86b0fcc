"""tritonconfig.backend_refusal: what a backend's load refuses that the config alone says, in
the backend's words, for `thaw up`'s read of the repository and the replica's load alike."""

from __future__ import annotations

import pytest

from tritonconfig import parse_config
from tritonconfig.backend_refusal import backend_refusal

_ONNX = 'backend: "onnxruntime"\n'
_TORCH = (
    'backend: "pytorch"\n'
    'input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }]\n'
    'output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [4] }]\n'
)


def _parameter(key: str, value: str) -> str:
    return f'parameters [{{ key: "{key}" value: {{ string_value: "{value}" }} }}]\n'


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            _ONNX + _parameter("execution_mode", "2"),
            "Invalid configuration value provided. Expected values for  execution_mode are 0 "
            "or 1 but got 2 .",
        ),
        (_ONNX + _parameter("enable_mem_arena", "maybe"), "failed to convert 'maybe' to boolean"),
        (
            _ONNX + _parameter("intra_op_thread_count", "many"),
            "failed to convert 'many' to integral number for parameter 'intra_op_thread_count'",
        ),
        (_TORCH + _parameter("INFERENCE_MODE", "perhaps"), "failed to convert 'perhaps' to"),
        (_TORCH + _parameter("DISABLE_CUDNN", "2x"), "failed to convert '2x' to boolean value"),
        (_TORCH + _parameter("ENABLE_WEIGHT_SHARING", "?"), "failed to convert '?' to boolean"),
        (
            _TORCH.replace(
                "data_type: TYPE_FP32 dims: [4] }]\noutput",
                "data_type: TYPE_UINT32 dims: [4] }]\noutput",
            ),
            "unsupported datatype TYPE_UINT32 for input 'INPUT__0' for model 'm'",
        ),
        (
            'name: "m"\n'
            + _TORCH.replace(
                "TYPE_FP32 dims: [4] }]\noutput", "TYPE_STRING dims: [2, 2] }]\noutput"
            ),
            "Triton only supports 1 dimensional List of String as input for 'INPUT__0' for "
            "model 'm'",
        ),
        (
            _TORCH + _parameter("TORCH_COMPILE_OPTIONAL_PARAMETERS", "{bad"),
            "model 'm': parameter `TORCH_COMPILE_OPTIONAL_PARAMETERS` is not JSON",
        ),
    ],
)
def test_a_refused_config_in_its_backends_words(text: str, says: str) -> None:
    refused = backend_refusal(parse_config(text, "config.pbtxt"), "m")
    assert refused is not None and refused.startswith(says), refused


@pytest.mark.parametrize(
    "text",
    [
        _ONNX + _parameter("execution_mode", "1"),
        _ONNX + _parameter("enable_mem_pattern", "Off"),
        _TORCH + _parameter("INFERENCE_MODE", "false"),
        _TORCH + _parameter("INTRA_OP_THREAD_COUNT", " 4 "),
        # Another backend's parameters are its own: not read here.
        'backend: "python"\n' + _parameter("execution_mode", "9"),
    ],
)
def test_a_config_its_backend_takes(text: str) -> None:
    assert backend_refusal(parse_config(text, "config.pbtxt"), "m") is None


@pytest.mark.parametrize(
    "value",
    [
        "9" * 5000,  # past Python's digit limit for int(): still the backend's refusal
        "1\x002",
        "\u0663\u0664x",  # Arabic-Indic digits, then junk
        "",
        " " * 1000,
    ],
)
def test_a_hostile_parameter_value_is_refused_not_raised(value: str) -> None:
    """Whatever a repository's config holds, the read answers with a refusal (a model
    unavailable), never an exception out of `thaw up`'s read."""
    for text, key in ((_ONNX, "intra_op_thread_count"), (_TORCH, "INTER_OP_THREAD_COUNT")):
        config = parse_config(text, "config.pbtxt")
        config.parameters[key].string_value = value
        refused = backend_refusal(config, "m")
        assert refused is not None and refused.startswith("failed to convert"), refused
