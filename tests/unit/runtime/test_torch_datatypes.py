"""A TorchScript model's config as Triton's libtorch backend reads it: datatypes PyTorch cannot
hold refuse its load in that backend's words (qa/L0_libtorch_io_types), and its INFERENCE_MODE
parameter (qa/L0_libtorch_inference_mode)."""

from __future__ import annotations

import pytest

from runtime.errors import RepositoryError
from runtime.model_config import inference_mode
from tritonconfig import parse_config
from tritonconfig.torch_datatypes import unsupported_datatype

_IO = """
name: "m" platform: "pytorch_libtorch" max_batch_size: 8
input [ {{ name: "INPUT0" data_type: {input} dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT__0" data_type: {output} dims: [ 16 ] }} ]
"""


@pytest.mark.parametrize(
    ("input_type", "output_type", "expected"),
    [
        ("TYPE_UINT32", "TYPE_INT8",
         "unsupported datatype TYPE_UINT32 for input 'INPUT0' for model 'm'"),
        ("TYPE_INT32", "TYPE_UINT64",
         "unsupported datatype TYPE_UINT64 for output 'OUTPUT__0' for model 'm'"),
        ("TYPE_UINT16", "TYPE_UINT64",  # the inputs are judged first
         "unsupported datatype TYPE_UINT16 for input 'INPUT0' for model 'm'"),
        ("TYPE_STRING", "TYPE_STRING", None),  # lists of strings
        ("TYPE_BF16", "TYPE_FP64", None),  # torch.bfloat16: taken here
    ],
)  # fmt: skip
def test_an_input_or_output_type_pytorch_lacks_refuses_the_load(
    input_type: str, output_type: str, expected: str | None
) -> None:
    config = parse_config(_IO.format(input=input_type, output=output_type), "m")
    assert unsupported_datatype(config, "m") == expected


_SEQUENCE = """
name: "s" platform: "pytorch_libtorch" max_batch_size: 4
input [ { name: "INPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  control_input [
    { name: "START__1" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID__2" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: %s } ] }
  ]
}
"""


def test_a_corrid_control_pytorch_lacks_refuses_the_load() -> None:
    refused = parse_config(_SEQUENCE % "TYPE_UINT32", "s")
    assert unsupported_datatype(refused, "s") == (
        "input 'CORRID__2' type 'TYPE_UINT32' is not supported by PyTorch."
    )
    assert unsupported_datatype(parse_config(_SEQUENCE % "TYPE_INT64", "s"), "s") is None


_MODE = (
    'name: "m" platform: "pytorch_libtorch" '
    'parameters: { key: "INFERENCE_MODE" value: { string_value: "%s" } }'
)


@pytest.mark.parametrize(
    ("value", "expected"), [("true", True), ("false", False), ("OFF", False), ("1", True)]
)
def test_inference_mode_reads_the_parameter_as_triton_does(value: str, expected: bool) -> None:
    assert inference_mode(parse_config(_MODE % value, "m")) is expected


def test_inference_mode_is_on_by_default_and_refuses_a_non_boolean() -> None:
    assert inference_mode(parse_config('name: "m" platform: "pytorch_libtorch"', "m")) is True
    with pytest.raises(RepositoryError, match="failed to convert 'maybe' to boolean value"):
        inference_mode(parse_config(_MODE % "maybe", "m"))
