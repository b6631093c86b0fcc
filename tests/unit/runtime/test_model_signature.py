"""Infer-request validation against the config, before anything runs."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from runtime.errors import InvalidInput
from runtime.inference import InferRequest, InferResponse, InferTensor, RequestedOutput
from runtime.model_signature import ModelSignature

CONFIG = """
name: "m"
max_batch_size: 4
input [ { name: "A" data_type: TYPE_FP32 dims: [ -1, 3 ] },
        { name: "B" data_type: TYPE_INT32 dims: [ 2 ] optional: true },
        { name: "R" data_type: TYPE_FP32 dims: [ 6 ] reshape: { shape: [ 2, 3 ] } optional: true } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]
"""


def _signature(text: str = CONFIG) -> ModelSignature:
    config = mc.ModelConfig()
    text_format.Parse(text, config)
    return ModelSignature.from_config(config)


def _tensor(
    name: str, datatype: str, shape: tuple[int, ...], dtype: str = "float32"
) -> InferTensor:
    return InferTensor(name, datatype, shape, np.zeros(shape, dtype=dtype))


def _request(*inputs: InferTensor, outputs: tuple[str, ...] = ()) -> InferRequest:
    return InferRequest("m", "", list(inputs), [RequestedOutput(o) for o in outputs])


def test_valid_request_returns_its_batch_size() -> None:
    sig = _signature()
    assert sig.validate(_request(_tensor("A", "FP32", (3, 5, 3)))) == 3


@pytest.mark.parametrize(
    ("inputs", "fragment"),
    [
        ([_tensor("Z", "FP32", (1, 1, 3))], "unexpected inference input 'Z'"),
        ([_tensor("A", "FP64", (1, 1, 3), "float64")], "input 'A' data-type is 'FP64'"),
        ([_tensor("A", "FP32", (1, 1, 4))], "unexpected shape for input 'A'"),
        ([_tensor("A", "FP32", (5, 1, 3))], "batch-size must be <= 4"),
        ([_tensor("A", "FP32", (0, 1, 3))], "batch-size must be <= 4"),
        ([_tensor("A", "FP32", (1, 3))], "unexpected shape for input 'A'"),
        ([], "missing required input(s) ['A']"),
        ([_tensor("A", "FP32", (1, 1, 3)), _tensor("A", "FP32", (1, 1, 3))], "more than once"),
        (
            [_tensor("A", "FP32", (1, 1, 3)), _tensor("B", "INT32", (2, 2), "int32")],
            "batch size 2 does not match",
        ),
    ],
)
def test_bad_inputs_are_400_naming_the_input(inputs: list[InferTensor], fragment: str) -> None:
    with pytest.raises(InvalidInput) as info:
        _signature().validate(_request(*inputs))
    assert info.value.status == 400
    assert fragment in info.value.message


def test_data_that_disagrees_with_shape_is_refused() -> None:
    tensor = InferTensor("A", "FP32", (1, 2, 3), np.zeros(5, dtype=np.float32))
    with pytest.raises(InvalidInput, match="holds 5 elements"):
        _signature().validate(_request(tensor))


def test_unknown_requested_output_is_refused() -> None:
    with pytest.raises(InvalidInput, match="unexpected inference output 'NOPE'"):
        _signature().validate(_request(_tensor("A", "FP32", (1, 1, 3)), outputs=("NOPE",)))


def test_reshape_is_applied_to_inputs() -> None:
    request = _request(_tensor("A", "FP32", (2, 1, 3)), _tensor("R", "FP32", (2, 6)))
    _signature().validate(request)
    assert request.inputs[1].data.shape == (2, 2, 3)
    assert request.inputs[1].shape == (2, 2, 3)


def test_flat_data_is_viewed_in_the_declared_shape() -> None:
    tensor = InferTensor("A", "FP32", (1, 2, 3), np.arange(6, dtype=np.float32))
    request = _request(tensor)
    _signature().validate(request)
    assert request.inputs[0].data.shape == (1, 2, 3)


def test_non_batching_model_takes_shape_as_is() -> None:
    sig = _signature(
        'name: "n" input [ { name: "X" data_type: TYPE_STRING dims: [ -1 ] } ] '
        'output [ { name: "Y" data_type: TYPE_STRING dims: [ -1 ] } ]'
    )
    tensor = InferTensor("X", "BYTES", (3,), np.array([b"a", b"b", b"c"], dtype=object))
    assert sig.validate(InferRequest("n", "", [tensor])) == 1
    with pytest.raises(InvalidInput, match="unexpected shape"):
        sig.validate(InferRequest("n", "", [_tensor("X", "BYTES", (1, 3), "object")]))


def test_finish_keeps_only_requested_outputs() -> None:
    sig = _signature(
        'name: "n" input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ] '
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }, '
        '{ name: "Z" data_type: TYPE_FP32 dims: [ 1 ] } ]'
    )
    request = InferRequest("n", "", [], [RequestedOutput("Z")], id="r1")
    outputs = [_tensor("Y", "FP32", (1,)), _tensor("Z", "FP32", (1,))]
    response = sig.finish(request, InferResponse("n", "1", outputs), 1)
    assert [o.name for o in response.outputs] == ["Z"]
    assert response.id == "r1"


def test_shapes_whose_product_overflows_int64_are_refused() -> None:
    sig = _signature(
        'name: "n" input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, -1 ] } ] '
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]'
    )
    tensor = InferTensor("X", "FP32", (2**32, 2**32), np.zeros(0, dtype=np.float32))
    with pytest.raises(InvalidInput, match="needs 18446744073709551616"):
        sig.validate(InferRequest("n", "", [tensor]))
