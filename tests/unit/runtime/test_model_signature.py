"""Infer-request validation against the config, before anything runs."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from runtime.errors import InvalidInput
from runtime.inference import InferRequest, InferResponse, InferTensor, RequestedOutput
from runtime.models.signature import ModelSignature

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
        ([_tensor("A", "FP32", (0, 1, 3))], "input byte size mismatch for input 'A'"),
        ([_tensor("A", "FP32", ())], "input 'A' has no shape but model requires batch dimension"),
        ([_tensor("A", "FP32", (1, 3))], "unexpected shape for input 'A'"),
        ([], "missing required input(s) ['A']"),
        ([_tensor("A", "FP32", (1, 1, 3)), _tensor("A", "FP32", (1, 1, 3))], "already exists"),
        (
            [_tensor("A", "FP32", (1, 1, 3)), _tensor("B", "INT32", (2, 2), "int32")],
            # (the last sent is checked first)
            "input 'A' batch size does not match other inputs for 'm'",
        ),
    ],
)
def test_bad_inputs_are_400_naming_the_input(inputs: list[InferTensor], fragment: str) -> None:
    with pytest.raises(InvalidInput) as info:
        _signature().validate(_request(*inputs))
    assert info.value.status == 400
    assert fragment in info.value.message


def test_missing_inputs_of_a_model_with_optional_ones_name_the_range_as_triton_does() -> None:
    with pytest.raises(InvalidInput) as info:
        _signature().validate(_request())
    assert info.value.message == (
        "expected number of inputs between 1 and 3 but got 0 inputs for model 'm'. Got "
        "input(s) [], but missing required input(s) ['A']. Please provide all required input(s)."
    )


def test_a_model_whose_inputs_are_all_optional_takes_a_request_without_any() -> None:
    sig = _signature(
        'name: "m"\ninput [ { name: "A" data_type: TYPE_FP32 dims: [ -1 ] optional: true } ]\n'
    )
    assert sig.validate(_request()) == 1


def test_data_that_disagrees_with_shape_is_refused() -> None:
    tensor = InferTensor("A", "FP32", (1, 2, 3), np.zeros(5, dtype=np.float32))
    with pytest.raises(InvalidInput, match="holds 5 elements"):
        _signature().validate(_request(tensor))


def test_unknown_requested_output_is_refused() -> None:
    with pytest.raises(InvalidInput, match="unexpected inference output 'NOPE'"):
        _signature().validate(_request(_tensor("A", "FP32", (1, 1, 3)), outputs=("NOPE",)))


def test_an_unknown_output_is_named_before_an_unknown_input_as_triton_does() -> None:
    with pytest.raises(InvalidInput, match="unexpected inference output 'NOPE'"):
        _signature().validate(_request(_tensor("Z", "FP32", (1, 1, 3)), outputs=("NOPE",)))


def test_reshape_is_applied_to_inputs() -> None:
    request = _request(_tensor("A", "FP32", (2, 1, 3)), _tensor("R", "FP32", (2, 6)))
    _signature().validate(request)
    assert request.inputs[1].data.shape == (2, 2, 3)
    assert request.inputs[1].shape == (2, 2, 3)


# L0_infer_reshape's variable-size reshapes (gen_qa_reshape_models.py --variable): a -1 of
# the dims is carried, in order, into the -1s of the reshape, and back for an output.
_VARIABLE_RESHAPE = """
name: "v"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1, -1, 1 ] reshape: { shape: [ -1 ] } },
        { name: "INPUT1" data_type: TYPE_INT32 dims: [ -1, 1 ] reshape: { shape: [ 1, -1 ] } } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1, -1, 1 ] reshape: { shape: [ -1 ] } },
         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 2, 4, -1, 6 ]
           reshape: { shape: [ 8, -1, 1, 6 ] } } ]
"""


def test_a_variable_size_is_carried_into_an_input_reshape() -> None:
    request = _request(_tensor("INPUT0", "INT32", (3, 1, 4, 1), "int32"),
                       _tensor("INPUT1", "INT32", (3, 4, 1), "int32"))  # fmt: skip
    _signature(_VARIABLE_RESHAPE).validate(request)
    assert [t.shape for t in request.inputs] == [(3, 4), (3, 1, 4)]


def test_a_variable_size_output_takes_its_config_dims_back() -> None:
    sig = _signature(_VARIABLE_RESHAPE)
    request = _request(_tensor("INPUT0", "INT32", (1, 1, 4, 1), "int32"))
    response = InferResponse("v", "1", [
        InferTensor("OUTPUT0", "INT32", (1, 4), np.arange(4, dtype=np.int32).reshape(1, 4)),
        InferTensor("OUTPUT1", "INT32", (1, 8, 5, 1, 6), np.zeros((1, 8, 5, 1, 6), np.int32)),
    ])  # fmt: skip
    finished = sig.finish(request, response, 1)
    assert [t.shape for t in finished.outputs] == [(1, 1, 4, 1), (1, 2, 4, 5, 6)]
    assert [t.data.shape for t in finished.outputs] == [(1, 1, 4, 1), (1, 2, 4, 5, 6)]


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


def _raw(config: str, body: bytes) -> InferRequest:
    request = InferRequest("m", "", [], raw_input=body, binary_output_default=True)
    _signature(config).validate(request)
    return request


_ONE_INPUT = """
name: "m"
max_batch_size: {batch}
input [ {{ name: "INPUT0" data_type: {dtype} dims: [ {dims} ] }} ]
output [ {{ name: "OUTPUT0" data_type: {dtype} dims: [ {dims} ] }} ]
"""


@pytest.mark.parametrize(
    ("batch", "dims", "shape"),
    [(8, "-1", (1, 6)), (0, "-1", (6,)), (8, "2, -1", (1, 2, 3)), (0, "3, 2", (3, 2))],
)
def test_raw_input_shape_is_deduced_from_the_config(
    batch: int, dims: str, shape: tuple[int, ...]
) -> None:
    values = np.arange(6, dtype=np.float32)
    config = _ONE_INPUT.format(batch=batch, dtype="TYPE_FP32", dims=dims)
    request = _raw(config, values.tobytes())
    [tensor] = request.inputs
    assert (tensor.name, tensor.datatype, tensor.shape) == ("INPUT0", "FP32", shape)
    np.testing.assert_array_equal(tensor.data.reshape(-1), values)
    assert request.raw_input is None


def test_raw_bytes_input_is_the_body_as_one_element() -> None:
    request = _raw(_ONE_INPUT.format(batch=8, dtype="TYPE_STRING", dims="1"), b"\xff427")
    [tensor] = request.inputs
    assert tensor.shape == (1, 1) and tensor.data.reshape(-1).tolist() == [b"\xff427"]


@pytest.mark.parametrize(
    ("config", "body", "message"),
    [
        # Triton's texts (observed on 2.51).
        (
            CONFIG,
            b"\0" * 12,
            "Raw request must only have 1 input (found 1) to be deduced but got 3 inputs in "
            "'m' model configuration",
        ),
        (
            _ONE_INPUT.format(batch=8, dtype="TYPE_FP16", dims="-1, -1"),
            b"\0" * 8,
            "The shape of the raw input 'INPUT0' can not be deduced because there are more "
            "than one variable-sized dimension",
        ),
        (
            _ONE_INPUT.format(batch=8, dtype="TYPE_STRING", dims="-1"),
            b"427",
            "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]",
        ),
        (
            _ONE_INPUT.format(batch=0, dtype="TYPE_STRING", dims="2"),
            b"427",
            "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]",
        ),
        (
            _ONE_INPUT.format(batch=8, dtype="TYPE_FP32", dims="-1"),
            b"\0" * 7,
            "input byte size mismatch for input 'INPUT0' for model 'm'. Expected 4, got 7",
        ),
        (
            _ONE_INPUT.format(batch=0, dtype="TYPE_FP32", dims="2"),
            b"\0" * 12,
            "input byte size mismatch for input 'INPUT0' for model 'm'. Expected 8, got 12",
        ),
        (
            _ONE_INPUT.format(batch=0, dtype="TYPE_FP32", dims="0, -1"),
            b"\0" * 4,
            "Expected 0, got 4",
        ),
        (
            _ONE_INPUT.format(batch=0, dtype="TYPE_BOOL", dims="-1"),
            b"\x00\x01\x02",
            "BOOL bytes other than 0 and 1",
        ),
    ],
)
def test_raw_input_that_cannot_be_deduced_is_400(config: str, body: bytes, message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        _raw(config, body)
    assert message in err.value.message
