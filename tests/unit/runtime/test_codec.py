"""The v2 codec: JSON and binary tensors in, JSON and binary outputs out, lies refused with 400."""

from __future__ import annotations

import json
import struct
import tracemalloc
from typing import Any

import numpy as np
import pytest

from runtime.codecs.rest import classify, decode_infer_request, encode_infer_response
from runtime.codecs.tensor_json import SHAPE_MISMATCH, float32_to_bf16
from runtime.datatypes import serialize_bytes
from runtime.errors import InvalidInput
from runtime.inference import InferRequest, InferResponse, InferTensor, RequestedOutput

NUMERIC = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}


def _decode(
    doc: dict[str, Any], binary: bytes = b"", *, binary_header: bool = False
) -> InferRequest:
    header = json.dumps(doc).encode()
    use_header = binary_header or bool(binary)
    return decode_infer_request(
        header + binary,
        header_length=len(header) if use_header else None,
        model_name="m",
        model_version="",
        max_json_depth=64,
    )


def _input(name: str, datatype: str, shape: list[int], data: Any = None, **params: Any) -> dict:
    entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape}
    if data is not None:
        entry["data"] = data
    if params:
        entry["parameters"] = params
    return entry


@pytest.mark.parametrize("datatype", sorted(NUMERIC))
def test_every_numeric_datatype_decodes_from_json_and_binary(datatype: str) -> None:
    expected: np.ndarray = (np.arange(6) % 2).astype(NUMERIC[datatype]).reshape(2, 3)
    from_json = _decode({"inputs": [_input("x", datatype, [2, 3], expected.tolist())]})
    raw = expected.tobytes()
    from_binary = _decode(
        {"inputs": [_input("x", datatype, [2, 3], binary_data_size=len(raw))]}, raw
    )
    for request in (from_json, from_binary):
        tensor = request.inputs[0]
        assert tensor.shape == (2, 3)
        assert tensor.data.dtype == expected.dtype
        np.testing.assert_array_equal(tensor.data, expected)
        assert "binary_data_size" not in tensor.parameters


def test_flat_and_nested_json_data_give_the_same_tensor() -> None:
    flat = _decode({"inputs": [_input("x", "INT32", [2, 2], [1, 2, 3, 4])]}).inputs[0]
    nested = _decode({"inputs": [_input("x", "INT32", [2, 2], [[1, 2], [3, 4]])]}).inputs[0]
    np.testing.assert_array_equal(flat.data, nested.data)
    assert flat.data.shape == (2, 2)


def test_bytes_inputs_from_json_strings_and_binary_wire_format() -> None:
    words = np.array([b"hello", "wörld".encode(), b""], dtype=np.object_)
    raw = serialize_bytes(words)
    from_json = _decode({"inputs": [_input("s", "BYTES", [3], ["hello", "wörld", ""])]})
    from_binary = _decode({"inputs": [_input("s", "BYTES", [3], binary_data_size=len(raw))]}, raw)
    for request in (from_json, from_binary):
        assert request.inputs[0].data.tolist() == words.tolist()


def test_bf16_json_rounds_to_nearest_and_binary_is_raw_words() -> None:
    tensor = _decode({"inputs": [_input("b", "BF16", [3], [1.0, -2.5, 3.14159])]}).inputs[0]
    assert tensor.data.dtype == np.uint16
    assert tensor.data.tolist() == [0x3F80, 0xC020, 0x4049]
    raw = np.array([0x3F80, 0x4000], dtype=np.uint16).tobytes()
    binary = _decode({"inputs": [_input("b", "BF16", [2], binary_data_size=4)]}, raw).inputs[0]
    assert binary.data.tolist() == [0x3F80, 0x4000]
    assert float32_to_bf16(np.array([np.nan], dtype=np.float32)).tolist() == [0x7FC0]


def test_ids_parameters_and_requested_outputs_pass_through() -> None:
    request = _decode(
        {
            "id": "req-7",
            "parameters": {"binary_data_output": True, "priority": 2},
            "inputs": [_input("x", "FP32", [1], [1.0], custom="yes")],
            "outputs": [
                {"name": "a"},
                {"name": "b", "parameters": {"binary_data": False, "classification": 3}},
            ],
        }
    )
    assert request.id == "req-7"
    assert request.parameters == {"priority": 2}  # binary_data_output is the codec's (Triton)
    assert request.binary_output_default is True
    assert request.inputs[0].parameters == {"custom": "yes"}
    # A listed output is binary only when it says so; `binary_data_output` is the default of
    # the outputs not listed (Triton's; qa/L0_http's test.sh checks it with curl).
    assert [(o.name, o.binary, o.class_count) for o in request.requested_outputs] == [
        ("a", False, 0),
        ("b", False, 3),
    ]


def test_reserved_triton_parameters_are_refused_in_tritons_words() -> None:
    doc = {"parameters": {"triton_": True}, "inputs": [_input("x", "FP32", [1], [1.0])]}
    with pytest.raises(InvalidInput) as info:
        _decode(doc)
    assert str(info.value) == (
        "parameter keys starting with 'triton_' are reserved for Triton usage and should not "
        "be specified."
    )
    # The one gRPC allows passes, as Thaw's own HTTP hops carry it on.
    doc["parameters"] = {"triton_enable_empty_final_response": True}
    assert _decode(doc).parameters == {"triton_enable_empty_final_response": True}


def test_an_empty_inputs_list_is_the_models_business() -> None:
    """A model whose inputs are all optional takes a request without any (Triton's HTTP
    front end only needs `inputs` to be a list)."""
    assert _decode({"inputs": []}).inputs == []


def test_of_two_inputs_with_wrong_data_the_last_is_named_as_triton_does() -> None:
    """Triton's core checks the data walking an unordered_map that iterates newest first."""
    short = np.arange(2, dtype=np.float32).tobytes()
    request = {
        "inputs": [
            _input("a", "FP32", [4], binary_data_size=len(short)),
            _input("b", "FP32", [4], binary_data_size=len(short)),
        ]
    }
    with pytest.raises(
        InvalidInput,
        match=r"input byte size mismatch for input 'b' for model 'm'\. Expected 16, got 8",
    ):
        _decode(request, short + short)


def test_two_binary_inputs_take_consecutive_sections() -> None:
    a = np.arange(4, dtype=np.float32)
    b = np.arange(3, dtype=np.int64)
    request = _decode(
        {
            "inputs": [
                _input("a", "FP32", [4], binary_data_size=16),
                _input("j", "INT32", [1], [5]),
                _input("b", "INT64", [3], binary_data_size=24),
            ]
        },
        a.tobytes() + b.tobytes(),
    )
    np.testing.assert_array_equal(request.inputs[0].data, a)
    assert request.inputs[1].data.tolist() == [5]
    np.testing.assert_array_equal(request.inputs[2].data, b)


LIES = [
    ({"inputs": [_input("x", "FP32", [4], binary_data_size=16)]}, bytes(12), "expecting 4 add"),
    ({"inputs": [_input("x", "FP32", [4], binary_data_size=12)]}, bytes(12), "Expected 16, got 12"),
    ({"inputs": [_input("x", "FP32", [2], binary_data_size=8)]}, bytes(12), "additional input"),
    ({"inputs": [_input("x", "FP32", [2], [1, 2])]}, bytes(4), "unexpected additional input data"),
    (
        {"inputs": [_input("x", "FP32", [1], [1], binary_data_size=4)]},
        bytes(4),
        "But set 'data' 'binary_data_size'",
    ),
    ({"inputs": [_input("x", "FP32", [2], binary_data_size=-8)]}, bytes(8), "binary_data_size"),
    ({"inputs": [_input("x", "FP32", [2], binary_data_size="8")]}, bytes(8), "binary_data_size"),
    ({"inputs": [_input("x", "BOOL", [2], binary_data_size=2)]}, b"\x01\x07", "other than 0"),
    (
        {"inputs": [_input("s", "BYTES", [1], binary_data_size=8)]},
        struct.pack("<I", 100) + b"abcd",
        "expecting string of length 100 but only 4 bytes available",
    ),
    (
        {"inputs": [_input("s", "BYTES", [2], binary_data_size=9)]},
        serialize_bytes(np.array([b"abcde"], dtype=object)),
        "expected 2 string elements for inference input 's' for model 'm', got 1",
    ),
]


@pytest.mark.parametrize(("doc", "binary", "message"), LIES)
def test_binary_sections_that_lie_are_refused(doc: dict, binary: bytes, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        _decode(doc, binary, binary_header=True)


def test_binary_size_without_header_length_is_refused() -> None:
    with pytest.raises(InvalidInput, match="no Inference-Header-Content-Length"):
        _decode({"inputs": [_input("x", "FP32", [1], binary_data_size=4)]})


def test_header_length_that_does_not_fit_the_body_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"inference header size should be in range \(0, 14\)"):
        decode_infer_request(
            b'{"inputs": []}',
            header_length=10_000,
            model_name="m",
            model_version="",
            max_json_depth=64,
        )


@pytest.mark.parametrize(
    "shape",
    [[2**62, 2**62], [-1, 4], [1 << 40], [True, 2], [1.5], ["4"], [2**31, 2**31, 2**31]],
)
def test_hostile_shapes_are_refused_without_allocating(shape: list[Any]) -> None:
    tracemalloc.start()  # numpy's buffers are traced too
    try:
        for doc, binary in (
            ({"inputs": [_input("x", "FP32", shape, [1.0])]}, b""),
            ({"inputs": [_input("x", "FP32", shape, binary_data_size=4)]}, bytes(4)),
        ):
            with pytest.raises(InvalidInput):
                _decode(doc, binary, binary_header=bool(binary))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes allocated refusing {shape}"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (_input("x", "FP32", [3], [1, 2]), SHAPE_MISMATCH),
        (_input("x", "FP32", [2, 2], [[1, 2], [3]]), SHAPE_MISMATCH),
        (_input("x", "INT32", [2], [1, 2, "x"]), SHAPE_MISMATCH),  # read up to the end only
        (_input("x", "INT32", [2], [1, "x", 3]), "non-signed-integer as signed-integer"),
        (_input("x", "UINT8", [1], [300]), "not valid UINT8"),
        (_input("x", "FP32", [1], [{"a": 1}]), "non-number as double"),
        # Triton's JSON parser takes no 1.5 for an int, true for a float, 1 for a BOOL.
        (_input("x", "INT32", [2], [1.5, 2]), "non-signed-integer as signed-integer"),
        (_input("x", "UINT8", [1], [1.0]), "non-unsigned-integer as unsigned-integer"),
        (_input("x", "FP32", [2], [True, False]), "non-number as double"),
        (_input("x", "FP64", [1], ["1"]), "non-number as double"),
        (_input("x", "FP32", [1], [None]), "non-number as double"),
        (_input("x", "BOOL", [2], [1, 0]), "non-boolean as boolean"),
        (_input("x", "FP32", [1], "1.0"), "must be a JSON list"),
        (_input("x", "BYTES", [1], [5]), "Unable to parse JSON bytes array: attempt to access"),
        (_input("x", "BYTES", [2], ["a"]), "expected 2 string elements for inference input 'x'"),
        (_input("x", "BYTES", [2], ["a", "b", "c"]), "unexpected number of string elements 3"),
        (_input("x", "FP33", [1], [1]), "invalid datatype for input x"),
        (_input("x", "FP32", [1]), "But no field is set"),
        ({"datatype": "FP32", "shape": [1], "data": [1]}, "Unable to parse 'name': attempt to"),
        ({"name": "x", "shape": [1], "data": [1]}, "Unable to parse 'datatype': attempt to"),
    ],
)
def test_bad_json_tensors_are_refused(entry: dict, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        _decode({"inputs": [entry]})


def test_data_whose_count_is_not_its_shapes_gets_tritons_exact_words() -> None:
    # qa/L0_http's test.sh greps the whole body: nothing may be added to the text.
    for data in ([1, 2, 3], [1, 2, 3, 4, 5]):
        with pytest.raises(InvalidInput) as info:
            _decode({"inputs": [_input("INPUT0", "INT32", [1, 4], data)]})
        assert info.value.message == (
            "Unable to parse 'data': Shape does not match true shape of 'data' field"
        )


def test_nested_data_is_read_leaf_by_leaf_whatever_its_nesting_as_triton_reads_it() -> None:
    (tensor,) = _decode({"inputs": [_input("x", "FP32", [3], [[1, 2], [3]])]}).inputs
    assert tensor.data.tolist() == [1.0, 2.0, 3.0]
    (tensor,) = _decode({"inputs": [_input("x", "INT32", [2, 2], [[1, 2], [3, 4]])]}).inputs
    assert tensor.data.tolist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "must be a JSON object"),
        ({"inputs": {}}, "Unable to parse 'inputs'"),
        ({"inputs": [1]}, "must be a JSON object"),
        ({"inputs": [_input("x", "FP32", [1], [1])] * 2}, "input 'x' already exists in request"),
        (
            {"id": 5, "inputs": [_input("x", "FP32", [1], [1])]},
            "Unable to parse 'id': attempt to access JSON non-string as string",
        ),
        ({"parameters": [], "inputs": [_input("x", "FP32", [1], [1])]}, "request params"),
        ({"parameters": None, "inputs": [_input("x", "FP32", [1], [1])]}, "request params"),
        (
            {
                "parameters": {"binary_data_output": "yes"},
                "inputs": [_input("x", "FP32", [1], [1])],
            },
            "binary_data_output",
        ),
        (
            {"outputs": {}, "inputs": [_input("x", "FP32", [1], [1])]},
            "Unable to parse 'outputs': attempt to access JSON non-array as array",
        ),
        (
            {"outputs": [{"name": "a"}] * 2, "inputs": [_input("x", "FP32", [1], [1])]},
            "output 'a' already exists in request",
        ),
    ],
)
def test_malformed_requests_are_refused(doc: Any, message: str) -> None:
    header = json.dumps(doc).encode()
    with pytest.raises(InvalidInput, match=message):
        decode_infer_request(
            header, header_length=None, model_name="m", model_version="", max_json_depth=64
        )


def _response(*tensors: InferTensor) -> InferResponse:
    return InferResponse("m", "1", list(tensors))


def _request(
    *outputs: RequestedOutput, binary_default: bool = False, rid: str | None = None
) -> InferRequest:
    return InferRequest("m", "", [], list(outputs), id=rid, binary_output_default=binary_default)


def _split(encoded: Any) -> tuple[dict[str, Any], bytes]:
    if encoded.header_length is None:
        return json.loads(encoded.body), b""
    return json.loads(encoded.body[: encoded.header_length]), encoded.body[encoded.header_length :]


def test_json_response_carries_flat_data_id_and_every_output() -> None:
    a = InferTensor("a", "FP32", (2, 2), np.array([[1.5, 2], [3, 4]], dtype=np.float32))
    s = InferTensor("s", "BYTES", (2,), np.array([b"x", "é".encode()], dtype=object))
    h = InferTensor("h", "FP16", (1,), np.array([0.5], dtype=np.float16))
    doc, tail = _split(encode_infer_response(_response(a, s, h), _request(rid="r1")))
    assert tail == b""
    assert doc["id"] == "r1"
    assert doc["model_name"] == "m"
    assert doc["model_version"] == "1"
    assert doc["outputs"][0] == {
        "name": "a",
        "datatype": "FP32",
        "shape": [2, 2],
        "data": [1.5, 2.0, 3.0, 4.0],
    }
    assert doc["outputs"][1]["data"] == ["x", "é"]
    assert doc["outputs"][2]["data"] == [0.5]


def test_binary_outputs_follow_the_header_in_order() -> None:
    a = InferTensor("a", "INT64", (3,), np.array([1, 2, 3], dtype=np.int64))
    s = InferTensor("s", "BYTES", (1,), np.array([b"\xff\x00"], dtype=object))
    b = InferTensor("b", "FP32", (1,), np.array([7], dtype=np.float32))
    request = _request(
        RequestedOutput("s", binary=True), RequestedOutput("b"), RequestedOutput("a", binary=True)
    )
    doc, tail = _split(encode_infer_response(_response(a, s, b), request))
    # The model's order, not the request's (as Triton 2.51 answers).
    assert [o["name"] for o in doc["outputs"]] == ["a", "s", "b"]
    assert "data" not in doc["outputs"][0]
    assert doc["outputs"][1]["parameters"]["binary_data_size"] == 6
    assert doc["outputs"][2]["data"] == [7.0]
    assert tail == np.array([1, 2, 3], np.int64).tobytes() + struct.pack("<I", 2) + b"\xff\x00"


def test_binary_data_output_default_makes_every_output_binary() -> None:
    a = InferTensor("a", "FP32", (2,), np.array([1, 2], dtype=np.float32))
    doc, tail = _split(encode_infer_response(_response(a), _request(binary_default=True)))
    assert doc["outputs"][0]["parameters"] == {"binary_data_size": 8}
    assert np.frombuffer(tail, dtype=np.float32).tolist() == [1.0, 2.0]


def test_a_requested_output_the_model_did_not_return_is_left_out_as_triton_does() -> None:
    a = InferTensor("a", "FP32", (1,), np.array([1], dtype=np.float32))
    b = InferTensor("b", "FP32", (1,), np.array([2], dtype=np.float32))
    request = _request(RequestedOutput("b"), RequestedOutput("zz"))
    doc, _ = _split(encode_infer_response(_response(a, b), request))
    assert [o["name"] for o in doc["outputs"]] == ["b"]


def test_non_utf8_bytes_output_in_json_asks_for_binary() -> None:
    s = InferTensor("s", "BYTES", (1,), np.array([b"\xff"], dtype=object))
    with pytest.raises(InvalidInput, match="binary_data"):
        encode_infer_response(_response(s), _request())


def test_classification_returns_top_k_value_index_strings() -> None:
    scores = InferTensor(
        "p", "FP32", (2, 4), np.array([[0.1, 0.7, 0.2, 0.0], [5, 1, 9, 3]], dtype=np.float32)
    )
    top = classify(scores, 2)
    assert top.datatype == "BYTES"
    assert top.shape == (2, 2)
    assert top.data.tolist() == [[b"0.700000:1", b"0.200000:2"], [b"9.000000:2", b"5.000000:0"]]
    doc, _ = _split(
        encode_infer_response(_response(scores), _request(RequestedOutput("p", class_count=1)))
    )
    assert doc["outputs"][0]["data"] == ["0.700000:1", "9.000000:2"]


def test_a_non_batching_models_classes_are_ranked_over_the_whole_tensor() -> None:
    # Triton's front ends rank a non-batching model's [2, 4] output as one entry of 8 classes
    # (qa/L0_infer_variable's nobatch models); a batching model's per batch entry.
    scores = InferTensor(
        "p", "FP32", (2, 4), np.array([[0.1, 0.7, 0.2, 0.0], [5, 1, 9, 3]], dtype=np.float32)
    )
    top = classify(scores, 3, batched=False)
    assert top.shape == (3,)
    assert top.data.tolist() == [b"9.000000:6", b"5.000000:4", b"3.000000:7"]
    assert classify(scores, 3, batched=True).shape == (2, 3)


def test_an_integer_outputs_classes_are_written_as_tritons_std_to_string_writes_them() -> None:
    # Triton 2.51 (side by side): "30:1" for an INT32 output, "3.000000:1" for FP32
    for datatype, dtype in [("INT32", np.int32), ("UINT8", np.uint8), ("INT64", np.int64)]:
        values = InferTensor("p", datatype, (3,), np.array([5, 30, 20], dtype=dtype))
        assert classify(values, 2).data.tolist() == [b"30:1", b"20:2"]
    big = InferTensor("p", "UINT64", (1,), np.array([2**64 - 1], dtype=np.uint64))
    assert classify(big, 1).data.tolist() == [b"18446744073709551615:0"]
    doubles = InferTensor("p", "FP64", (2,), np.array([0.5, 2.0], dtype=np.float64))
    assert classify(doubles, 1).data.tolist() == [b"2.000000:1"]


@pytest.mark.parametrize("datatype", ["BYTES", "BOOL", "FP16", "BF16"])
def test_a_type_triton_cannot_classify_is_refused_in_its_words(datatype: str) -> None:
    dtype = {"BYTES": object, "BOOL": np.bool_, "FP16": np.float16, "BF16": np.uint16}[datatype]
    tensor = InferTensor("p", datatype, (2,), np.array([1, 0], dtype=dtype))
    with pytest.raises(InvalidInput) as refused:
        classify(tensor, 1)
    assert refused.value.message == (
        f"class result not available for output due to unsupported type '{datatype}'"
    )


def test_classification_appends_the_outputs_labels_where_it_has_one() -> None:
    scores = InferTensor("p", "FP32", (3,), np.array([0.1, 0.7, 0.2], dtype=np.float32))
    # Triton 2.51: "value:index:label"; a class past the labels (or with an empty one) has none.
    top = classify(
        scores,
        3,
        (
            "cat",
            "",
        ),
    )
    assert top.data.tolist() == [b"0.700000:1", b"0.200000:2", b"0.100000:0:cat"]
    requested = RequestedOutput("p", class_count=1, labels=("cat", "dog"))
    doc, _ = _split(encode_infer_response(_response(scores), _request(requested)))
    assert doc["outputs"][0]["data"] == ["0.700000:1:dog"]


def test_header_length_zero_makes_the_whole_body_a_raw_input_sent_back_binary() -> None:
    body = np.arange(4, dtype=np.float32).tobytes()
    request = decode_infer_request(
        body, header_length=0, model_name="m", model_version="", max_json_depth=64
    )
    assert request.inputs == []
    assert request.raw_input == body
    assert request.binary_output_default is True


INT64_MAX = (1 << 63) - 1


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        # Triton's texts (main, after 2.51): the overflow of the element count ...
        (
            [2**4, 2**60 + 2],
            "invalid shape for input 'x': shape [16,1152921504606846978] causes total element "
            f"count to exceed maximum size of {INT64_MAX}",
        ),
        # ... of the byte size (FP32 is 4 bytes) ...
        (
            [2**2, 2**60 + 2],
            "byte size overflow for input 'x': element count (4611686018427387912) * data type "
            f"size (4) exceeds maximum allowed size ({INT64_MAX})",
        ),
        # ... a dimension past INT64_MAX, and a negative one (Triton's status there is 500).
        ([2**63], "shape [9223372036854775808] contains one or more invalid dimensions"),
        (
            [2, -5],
            "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer",
        ),
        ([1.5], "Unable to parse 'shape'"),
        ([True], "Unable to parse 'shape'"),
    ],
)
def test_shapes_that_overflow_or_are_not_unsigned_ints_get_tritons_texts(
    shape: list[Any], message: str
) -> None:
    with pytest.raises(InvalidInput) as err:
        _decode({"inputs": [_input("x", "FP32", shape, [1.0])]})
    assert message in err.value.message


def test_a_long_bad_shape_is_shortened_in_the_message() -> None:
    with pytest.raises(InvalidInput) as err:
        _decode({"inputs": [_input("x", "FP32", [1] * 10_000 + [-1], [1.0])]})
    assert len(err.value.message) < 300
    assert "..." in err.value.message


@pytest.mark.parametrize("datatype", ["FP32", "BYTES", "BOOL"])
def test_an_empty_shape_too_large_for_an_array_is_invalid_input(datatype: str) -> None:
    """Found by tests/fuzz/test_fuzz_v2_codec.py: a 0 dim keeps Triton's running element count
    at 0, but numpy refuses the other dims' product (`ValueError: array is too big`, a 500)."""
    shape = [808415646, 0, 51173656, 140265873881903056]
    with pytest.raises(InvalidInput, match="too large for an array"):
        _decode({"inputs": [_input("x", datatype, shape, [])]})
    assert _decode({"inputs": [_input("x", datatype, [3, 0, 5], [])]}).inputs[0].data.shape == (
        3, 0, 5,
    )  # fmt: skip
