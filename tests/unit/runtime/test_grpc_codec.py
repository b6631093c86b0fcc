"""runtime.codecs.protobuf: ModelInferRequest -> the InferRequest HTTP builds, every datatype (BYTES
and BF16 too), typed contents, parameters checked as Triton's gRPC frontend checks them, and
raw_output_contents back."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from runtime.codecs.protobuf import (
    decode_model_infer,
    encode_model_infer,
    message_ref,
    request_parameters,
)
from runtime.codecs.rest import decode_infer_request
from runtime.errors import InvalidInput, ModelNotFound
from runtime.inference import InferResponse, InferTensor
from thawwire.grpc_messages import FINAL_RESPONSE
from thawwire.grpc_service import pb

_FIXED = {
    "BOOL": np.array([True, False, True]),
    "UINT8": np.array([0, 7, 255], dtype=np.uint8),
    "UINT16": np.array([0, 7, 65535], dtype=np.uint16),
    "UINT32": np.array([0, 7, 1 << 31], dtype=np.uint32),
    "UINT64": np.array([0, 7, 1 << 63], dtype=np.uint64),
    "INT8": np.array([-128, 0, 127], dtype=np.int8),
    "INT16": np.array([-1, 0, 1], dtype=np.int16),
    "INT32": np.array([-1, 0, 1 << 30], dtype=np.int32),
    "INT64": np.array([-1, 0, 1 << 62], dtype=np.int64),
    "FP16": np.array([0.5, -1.0, 2.0], dtype=np.float16),
    "FP32": np.array([0.5, -1.0, 2.0], dtype=np.float32),
    "FP64": np.array([0.5, -1.0, 2.0], dtype=np.float64),
    "BF16": np.array([0x3F80, 0xC000, 0x0000], dtype=np.uint16),  # 1.0, -2.0, 0.0
}


def _raw(name: str, datatype: str, shape: list[int], raw: bytes) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="m", model_version="1", id="r")
    message.inputs.add(name=name, datatype=datatype, shape=shape)
    message.raw_input_contents.append(raw)
    return message


@pytest.mark.parametrize("datatype", sorted(_FIXED))
def test_raw_contents_of_every_fixed_size_datatype(datatype: str) -> None:
    array = _FIXED[datatype]
    request = decode_model_infer(_raw("I", datatype, [3], array.tobytes()))
    (tensor,) = request.inputs
    assert (tensor.name, tensor.datatype, tensor.shape) == ("I", datatype, (3,))
    assert tensor.data.tobytes() == array.tobytes()
    # The same tensor through HTTP's binary extension decodes to the same request.
    header = f'{{"inputs":[{{"name":"I","datatype":"{datatype}","shape":[3],'
    header += f'"parameters":{{"binary_data_size":{array.nbytes}}}}}]}}'
    body = header.encode() + array.tobytes()
    http = decode_infer_request(
        body, header_length=len(header), model_name="m", model_version="1", max_json_depth=10
    )
    assert http.inputs[0].data.tobytes() == tensor.data.tobytes()
    assert http.inputs[0].shape == tensor.shape


def test_bytes_travel_length_prefixed_and_typed() -> None:
    items = [b"a", b"", "é".encode(), b"\x00\xff"]
    raw = b"".join(len(i).to_bytes(4, "little") + i for i in items)
    assert list(decode_model_infer(_raw("S", "BYTES", [4], raw)).inputs[0].data) == items
    typed = pb.ModelInferRequest(model_name="m")
    typed.inputs.add(name="S", datatype="BYTES", shape=[2, 2]).contents.bytes_contents.extend(items)
    data = decode_model_infer(typed).inputs[0].data
    assert data.shape == (2, 2) and list(data.reshape(-1)) == items
    with pytest.raises(
        InvalidInput,
        match="expected 5 string elements for inference input 'S' for model 'm', got 4",
    ):
        decode_model_infer(_raw("S", "BYTES", [5], raw))


def test_bytes_element_counts_are_checked_in_tritons_words() -> None:
    one = (1).to_bytes(4, "little") + b"x"
    with pytest.raises(InvalidInput) as info:
        decode_model_infer(_raw("S", "BYTES", [2], one * 3))
    assert str(info.value) == (
        "unexpected number of string elements 3 for inference input 'S' for model 'm', expecting 2"
    )
    with pytest.raises(InvalidInput, match="incomplete string length indicator for inference"):
        decode_model_infer(_raw("S", "BYTES", [2], one + b"\x01\x00"))


def test_of_two_inputs_with_wrong_data_the_last_is_named_as_triton_does() -> None:
    message = pb.ModelInferRequest(model_name="m")
    for name in ("A", "B"):
        message.inputs.add(name=name, datatype="FP32", shape=[4])
        message.raw_input_contents.append(b"\x00" * 8)
    with pytest.raises(InvalidInput, match="mismatch for input 'B' for model 'm'"):
        decode_model_infer(message)
    message.raw_input_contents[1] = b"\x00" * 16
    with pytest.raises(InvalidInput, match="mismatch for input 'A' for model 'm'"):
        decode_model_infer(message)


def test_a_request_without_inputs_decodes_and_keeps_the_order_of_its_inputs() -> None:
    """No inputs is the model's business (all may be optional); several keep their order."""
    assert decode_model_infer(pb.ModelInferRequest(model_name="m")).inputs == []
    message = pb.ModelInferRequest(model_name="m")
    for name in ("A", "B", "C"):
        message.inputs.add(name=name, datatype="FP32", shape=[1])
        message.raw_input_contents.append(b"\x00" * 4)
    assert [t.name for t in decode_model_infer(message).inputs] == ["A", "B", "C"]


@pytest.mark.parametrize(
    ("datatype", "field", "values", "expected"),
    [
        ("INT8", "int_contents", [-1, 300], np.array([-1, 44], dtype=np.int8)),  # low byte kept
        ("UINT16", "uint_contents", [1, 70000], np.array([1, 4464], dtype=np.uint16)),
        ("INT64", "int64_contents", [-5, 5], np.array([-5, 5], dtype=np.int64)),
        ("FP32", "fp32_contents", [0.5, 2.0], np.array([0.5, 2.0], dtype=np.float32)),
        ("BOOL", "bool_contents", [True, False], np.array([True, False])),
    ],
)
def test_typed_contents(
    datatype: str, field: str, values: list[object], expected: np.ndarray
) -> None:
    message = pb.ModelInferRequest(model_name="m")
    getattr(message.inputs.add(name="I", datatype=datatype, shape=[2]).contents, field).extend(
        values
    )
    data = decode_model_infer(message).inputs[0].data
    assert data.dtype == expected.dtype and data.tolist() == expected.tolist()


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        (lambda m: m.inputs[0].contents.fp32_contents.append(1.0), "contents field must not be"),
        (lambda m: m.inputs.add(name="J", datatype="FP32", shape=[1]),
         "unable to find data for input tensor 'J' for model 'm' in request."),
        (lambda m: setattr(m.inputs[0], "datatype", "FP8"), "unknown datatype"),
        (lambda m: m.inputs[0].shape.__setitem__(0, -3), "Unable to parse 'shape'"),
        (lambda m: m.inputs[0].shape.__setitem__(0, 1 << 62), "byte size overflow"),
        (lambda m: m.inputs[0].shape.__setitem__(0, 4),
         "input byte size mismatch for input 'I' for model 'm'. Expected 16, got 12"),
        # found by tests/fuzz: an empty shape whose other dims overflow was numpy's ValueError
        (lambda m: m.inputs[0].shape.extend([0, 1 << 62]), "too large for an array"),
        (lambda m: m.inputs[0].parameters["shared_memory_region"].string_param, None),
    ],
)  # fmt: skip
def test_bad_tensors_are_invalid_input(mutate: object, error: str | None) -> None:
    message = _raw("I", "FP32", [3], np.zeros(3, np.float32).tobytes())
    mutate(message)  # type: ignore[operator]
    if error is None:
        message.inputs[0].parameters["shared_memory_region"].string_param = "region0"
        message.inputs[0].parameters["shared_memory_byte_size"].int64_param = 12
        error = "shared memory"
    with pytest.raises(InvalidInput, match=error):
        decode_model_infer(message)


def test_raw_entries_past_the_last_input_are_not_read() -> None:
    # Triton 2.51 serves such a request (observed side by side); a missing entry is refused.
    message = _raw("I", "FP32", [3], np.zeros(3, np.float32).tobytes())
    message.raw_input_contents.append(b"extra")
    assert [t.name for t in decode_model_infer(message).inputs] == ["I"]


def test_an_input_without_data_is_named_front_to_back() -> None:
    # Triton's gRPC frontend looks for each input's data in request order, before its core
    # checks the inputs newest first: of two inputs without data, the first is named.
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="I", datatype="FP32", shape=[1])
    message.inputs.add(name="J", datatype="FP32", shape=[1])
    with pytest.raises(InvalidInput, match="unable to find data for input tensor 'I'"):
        decode_model_infer(message)


def _typed(datatype: str, shape: list[int], **fields: list[object]) -> Any:
    message = pb.ModelInferRequest(model_name="m")
    contents = message.inputs.add(name="I", datatype=datatype, shape=shape).contents
    contents.SetInParent()  # present on the wire even when it holds no field
    for field, values in fields.items():
        getattr(contents, field).extend(values)
    return message


@pytest.mark.parametrize(
    ("message", "error"),
    [  # Triton 2.51's texts, observed over gRPC side by side
        (_typed("FP32", [1], int_contents=[1]),
         "unexpected explicit tensor data for input tensor 'I' for model 'm' of type 'INT32', "
         "expected datatype 'FP32'"),
        # the fields in the message's order: int_contents is looked at before fp32_contents
        (_typed("FP32", [1], fp32_contents=[1.0], int_contents=[1]),
         "of type 'INT32', expected datatype 'FP32'"),
        (_typed("INT32", [1], int_contents=[1], fp32_contents=[1.0]),
         "unexpected explicit tensor data for input tensor 'I' for model 'm', binary data was "
         "already supplied."),
        (_typed("INT32", [3], uint_contents=[1, 2, 3]),
         "of type 'UINT32', expected datatype 'INT32'"),
        (_typed("INT8", [1], uint_contents=[1]), "of type 'UINT32', expected datatype 'INT8'"),
        (_typed("FP16", [1], fp32_contents=[1.0]), "of type 'FP32', expected datatype 'FP16'"),
        (_typed("FP99", [1], fp32_contents=[1.0]), "of type 'FP32', expected datatype '<invalid>'"),
        (_typed("FP32", [4], fp32_contents=[1, 2, 3]),
         "input byte size mismatch for input 'I' for model 'm'. Expected 16, got 12"),
        (_typed("FP32", [4], fp32_contents=[1, 2, 3, 4, 5]), "Expected 16, got 20"),
        (_typed("FP16", [2]),
         "input byte size mismatch for input 'I' for model 'm'. Expected 4, got 0"),
        (_typed("BYTES", [3], bytes_contents=[b"x", b"yy"]),
         "expected 3 string elements for inference input 'I' for model 'm', got 2"),
        (_typed("BYTES", [2], bytes_contents=[b"x", b"yy", b"z", b"w"]),  # (Triton 2.51's)
         "unexpected number of string elements 3 for inference input 'I' for model 'm', "
         "expecting 2"),
    ],
)  # fmt: skip
def test_typed_contents_are_checked_in_tritons_words(message: Any, error: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        decode_model_infer(message)
    assert error in str(refused.value)


def test_parameters_are_the_values_http_json_gives() -> None:
    message = _raw("I", "FP32", [1], np.zeros(1, np.float32).tobytes())
    message.parameters["sequence_id"].string_param = "seq-9"
    message.parameters["sequence_start"].bool_param = True
    message.parameters["priority"].uint64_param = 2
    message.parameters["timeout"].int64_param = 1500
    message.parameters["custom"].double_param = 0.25
    request = decode_model_infer(message)
    assert request.parameters == {
        "sequence_id": "seq-9", "sequence_start": True, "priority": 2, "timeout": 1500,
        "custom": 0.25,
    }  # fmt: skip
    assert request.id == "r" and request.model_version == "1"


@pytest.mark.parametrize(
    ("key", "field", "value", "error"),
    [
        ("sequence_id", "bool_param", True, "expected int64_param or string_param"),
        ("priority", "int64_param", -1, "expected value >= 0"),
        ("priority", "string_param", "high", "expected int64_param or uint64_param"),
        ("timeout", "double_param", 1.5, "'timeout' parameter, expected int64_param"),
        ("sequence_end", "int64_param", 1, "expected bool_param"),
        ("triton_secret", "bool_param", True, "reserved for Triton usage"),
    ],
)
def test_parameters_of_the_wrong_type_are_refused(
    key: str, field: str, value: object, error: str
) -> None:
    message = pb.ModelInferRequest()
    setattr(message.parameters[key], field, value)
    with pytest.raises(InvalidInput, match=error):
        request_parameters(message.parameters)
    ok = pb.ModelInferRequest()
    ok.parameters["triton_enable_empty_final_response"].bool_param = True
    assert request_parameters(ok.parameters) == {"triton_enable_empty_final_response": True}


def test_a_negative_int64_sequence_id_is_read_as_tritons_uint64() -> None:
    # Triton 2.51 takes int64_param -3 and runs the sequence 2**64 - 3 (its id is a uint64);
    # over REST a negative id is refused, as there.
    message = pb.ModelInferRequest()
    message.parameters["sequence_id"].int64_param = -3
    assert request_parameters(message.parameters) == {"sequence_id": (1 << 64) - 3}


def test_requested_outputs_and_classification() -> None:
    message = _raw("I", "FP32", [3], np.zeros(3, np.float32).tobytes())
    out = message.outputs.add(name="OUT")
    out.parameters["classification"].int64_param = 2
    out.parameters["binary_data"].bool_param = False  # meaningless over gRPC: ignored
    request = decode_model_infer(message)
    (wanted,) = request.requested_outputs
    assert (wanted.name, wanted.class_count, wanted.parameters) == ("OUT", 2, {"classification": 2})
    response = InferResponse(
        "m", "1", [InferTensor("OUT", "FP32", (3,), np.array([1.0, 3.0, 2.0], np.float32))]
    )
    encoded = encode_model_infer(response, request)
    assert encoded.outputs[0].datatype == "BYTES" and list(encoded.outputs[0].shape) == [2]
    raw = encoded.raw_output_contents[0]
    assert b"3.000000:1" in raw and b"2.000000:2" in raw
    bad = pb.ModelInferRequest()
    bad.outputs.add(name="O").parameters["classification"].int64_param = 0
    bad.inputs.add(name="I", datatype="FP32", shape=[0]).contents.SetInParent()
    with pytest.raises(InvalidInput, match="expected >= 0"):
        decode_model_infer(bad)


def test_responses_leave_in_raw_output_contents_with_parameters() -> None:
    request = decode_model_infer(_raw("I", "FP32", [2], np.zeros(2, np.float32).tobytes()))
    outputs = [
        InferTensor("A", "FP32", (2,), np.array([1.5, 2.5], np.float32)),
        InferTensor("S", "BYTES", (1,), np.array([b"hi"], dtype=object)),
        InferTensor("B", "BF16", (1,), np.array([0x3F80], np.uint16)),
    ]
    response = InferResponse("m", "3", outputs, parameters={"seq": 4, "note": "x", "ok": True})
    message = encode_model_infer(response, request, final=True)
    assert (message.model_name, message.model_version, message.id) == ("m", "3", "r")
    assert [o.name for o in message.outputs] == ["A", "S", "B"]
    assert message.raw_output_contents[0] == np.array([1.5, 2.5], np.float32).tobytes()
    assert message.raw_output_contents[1] == b"\x02\x00\x00\x00hi"
    assert message.raw_output_contents[2] == b"\x80\x3f"
    assert message.parameters["seq"].int64_param == 4
    assert message.parameters["ok"].bool_param is True
    assert message.parameters[FINAL_RESPONSE].bool_param is True
    assert FINAL_RESPONSE not in encode_model_infer(response, request).parameters


def test_names_that_are_not_names_are_not_found() -> None:
    assert message_ref("m", "") == ("m", None)
    assert message_ref("m", "2") == ("m", "2")
    for name, version in (("../etc", ""), ("", "")):
        with pytest.raises(ModelNotFound):
            message_ref(name, version)
    # A version that is no version is Triton's INVALID_ARGUMENT, in its words.
    with pytest.raises(InvalidInput, match="version string 'x/1' \\(details: stol\\)"):
        message_ref("m", "x/1")


def test_an_input_sent_twice_is_refused_naming_it() -> None:
    message = pb.ModelInferRequest(model_name="m")
    for name in ("A", "B", "A"):
        message.inputs.add(name=name, datatype="FP32", shape=[1])
        message.raw_input_contents.append(b"\x00" * 4)
    with pytest.raises(InvalidInput, match="input 'A' already exists in request"):
        decode_model_infer(message)


def test_each_input_keeps_its_own_parameters_and_bytes() -> None:
    """Input i is raw_input_contents[i] with input i's parameters (not the server's shm ones)."""
    message = pb.ModelInferRequest(model_name="m")
    for index, name in enumerate(("A", "B")):
        io = message.inputs.add(name=name, datatype="INT32", shape=[1])
        io.parameters["tag"].int64_param = index + 10
        message.raw_input_contents.append(np.int32(index + 1).tobytes())
    message.inputs[1].parameters["shared_memory_byte_size"].int64_param = 4  # no region: ignored
    inputs = decode_model_infer(message).inputs
    assert [(t.name, t.data.tolist(), t.parameters) for t in inputs] == [
        ("A", [1], {"tag": 10}),
        ("B", [2], {"tag": 11}),
    ]


def test_contents_beside_fewer_raw_entries_name_the_first_such_input() -> None:
    """Triton's frontend refuses an input sent both ways before counting raw entries, in the
    request's order (Triton's grpc_explicit_int_content_client.py expects these words)."""
    message = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        message.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        message.inputs[-1].contents.int_contents.extend(range(16))
    message.raw_input_contents.append(np.zeros(8, np.int32).tobytes())
    with pytest.raises(InvalidInput) as refused:
        decode_model_infer(message)
    assert str(refused.value) == (
        "contents field must not be specified when using raw_input_contents for 'INPUT0' "
        "for model 'simple'"
    )
