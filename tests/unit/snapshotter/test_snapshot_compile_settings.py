"""`TORCH_COMPILE_OPTIONAL_PARAMETERS` (Triton's name) parsed strictly, the warm-up inputs a
config implies, and the key a compile cache is stored under."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from runtime.backends.torch_backend import positions
from snapshotter.compile_cache import WarmupInput, arg_positions, compile_key, warmup_inputs
from tritonconfig import (
    CompileSettings,
    ModelConfigError,
    compile_settings,
    parse_compile_settings,
)


def _config(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_parameter_turns_compile_on_and_disable_turns_it_off() -> None:
    assert compile_settings(_config('name: "m"')) is None
    on = _config(
        'name: "m" parameters { key: "TORCH_COMPILE_OPTIONAL_PARAMETERS" '
        'value { string_value: "{\\"mode\\": \\"max-autotune\\", \\"fullgraph\\": true}" } }'
    )
    settings = compile_settings(on)
    assert settings == CompileSettings(mode="max-autotune", fullgraph=True)
    assert settings.kwargs() == {"fullgraph": True, "backend": "inductor", "mode": "max-autotune"}
    assert parse_compile_settings("") == CompileSettings()
    assert parse_compile_settings('{"disable": true}') is None
    assert parse_compile_settings('{"disable": false, "dynamic": false}') == CompileSettings(
        dynamic=False
    )
    assert parse_compile_settings('{"mode": "default"}').kwargs() == {  # type: ignore[union-attr]
        "fullgraph": False,
        "backend": "inductor",
    }


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{nope", "is not JSON"),
        ("[" * 100_000, "is not JSON"),
        ("[1]", "must be a JSON object"),
        ('{"fullgrap": true}', "unknown key 'fullgrap'"),
        ('{"fullgraph": "yes"}', "`fullgraph` = 'yes', must be bool"),
        ('{"mode": "fastest"}', "`mode` = 'fastest'"),
        ('{"mode": "max-autotune", "options": {"a": 1}}', "not both"),
        ('{"options": []}', "must be dict"),
    ],
)
def test_malformed_settings_name_the_parameter(raw: str, message: str) -> None:
    with pytest.raises(ModelConfigError, match="TORCH_COMPILE_OPTIONAL_PARAMETERS") as info:
        parse_compile_settings(raw)
    assert message in str(info.value)


def test_warmup_inputs_follow_the_config() -> None:
    config = _config(
        """name: "m" max_batch_size: 8
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1, 16 ] },
                { name: "INPUT__1" data_type: TYPE_INT64 dims: [ 3 ] } ]"""
    )
    assert warmup_inputs(config) == [
        WarmupInput("INPUT__0", "float32", (1, 1, 16)),
        WarmupInput("INPUT__1", "int64", (1, 3)),
    ]
    unbatched = _config('name: "m" input [ { name: "x" data_type: TYPE_BF16 dims: [ 4 ] } ]')
    assert warmup_inputs(unbatched) == [WarmupInput("x", "bfloat16", (4,))]
    strings = _config('name: "m" input [ { name: "x" data_type: TYPE_STRING dims: [ 1 ] } ]')
    assert warmup_inputs(strings) is None


def test_compile_key_changes_with_what_a_compile_depends_on() -> None:
    inputs = [WarmupInput("x", "float32", (1, 8))]
    key = compile_key("cpu", CompileSettings(), inputs)
    assert key["target"] == "cpu" and key["inputs"] == "float32[1,8]" and "host" not in key
    assert compile_key("cpu", CompileSettings(mode="max-autotune"), inputs) != key
    assert compile_key("cpu", CompileSettings(), [WarmupInput("x", "float32", (1, 9))]) != key
    assert compile_key("cuda:sm_90", CompileSettings(), inputs)["target"] == "cuda:sm_90"
    kernels = compile_key("cpu", CompileSettings(), inputs, kernels=True)
    assert kernels["host"].count(":") == 1 and {**kernels, "host": ""}.keys() >= key.keys()


@pytest.mark.parametrize(
    ("names", "forward_args"),
    [
        (["INPUT__1", "INPUT__0"], ["a", "b"]),
        (["b", "a"], ["a", "b"]),
        (["x", "y"], ["a", "b"]),
        (["INPUT__0", "INPUT__2"], []),
    ],
)
def test_warmup_argument_order_is_the_runtimes(names: list[str], forward_args: list[str]) -> None:
    assert arg_positions(names, forward_args) == positions(names, forward_args)
