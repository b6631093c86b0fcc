"""Fuzz the KServe v2 request codec (JSON bodies and Triton's binary tensor sections).

Property: `decode_infer_request` on any body, and `encode_infer_response` echoing what it
decoded, either succeed or raise the runtime's own `ServingError` (a JSON 4xx/5xx for the
client); never another exception, never a hang (each example has a deadline).
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from typing import Any

from hypothesis import strategies as st

from runtime.codecs.body import decode_content, parse_json
from runtime.codecs.rest import decode_infer_request, encode_infer_response
from runtime.datatypes import V2_DATATYPES, element_size
from runtime.errors import ServingError
from runtime.inference import InferResponse, InferTensor
from tests.fuzz.targets import fuzz_target, json_values

MAX_DEPTH = 16
_DATATYPES = st.sampled_from(sorted(V2_DATATYPES)) | st.sampled_from(["", "FP8", "fp32"])
_DIMS = st.integers(0, 4) | st.integers(-2, 1 << 64) | st.sampled_from([True, 1.0, "2", None])
_SHAPES = st.lists(_DIMS, max_size=4)
_ELEMENTS = (
    st.integers(-(1 << 65), 1 << 65)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.booleans()
    | st.text(max_size=6)
    | st.none()
)


@st.composite
def _input(draw: st.DrawFn) -> tuple[dict[str, Any], bytes]:
    """One input entry and the binary section it brings (b"" for a JSON input)."""
    shape = draw(_SHAPES)
    datatype = draw(_DATATYPES)
    entry: dict[str, Any] = {"name": draw(st.sampled_from(["INPUT0", "INPUT1", "", "x"]))}
    entry.update(datatype=datatype, shape=shape)
    count = math.prod(d for d in shape if type(d) is int and 0 <= d <= 4) if shape else 1
    if draw(st.booleans()):  # binary: the right size or not
        size = count * (element_size(datatype) if datatype in V2_DATATYPES else 4)
        size = draw(st.sampled_from([size, max(0, size - 1), size + 3]) | st.integers(-1, 64))
        raw = draw(st.binary(min_size=max(0, size), max_size=max(0, size)))
        params = {"binary_data_size": draw(st.sampled_from([size, str(size), None, 2.5]))}
        entry["parameters"] = params
        return entry, raw
    data = draw(st.lists(_ELEMENTS, min_size=count, max_size=count) | json_values)
    if draw(st.booleans()) and isinstance(data, list) and shape and len(shape) == 2:
        rows = shape[0] if type(shape[0]) is int and 0 < shape[0] <= 4 else 1
        data = [data[i::rows] for i in range(rows)]  # nested rows, right or wrong
    entry["data"] = data
    if draw(st.booleans()):
        entry["parameters"] = draw(json_values)
    return entry, b""


@st.composite
def _bodies(draw: st.DrawFn) -> tuple[bytes, int | None]:
    """A request body and its Inference-Header-Content-Length (None when absent)."""
    if draw(st.integers(0, 9)) == 0:  # arbitrary bytes, as they come off the wire
        body = draw(st.binary(max_size=256))
        return body, draw(st.none() | st.integers(-1, len(body) + 1))
    pairs = draw(st.lists(_input(), max_size=3))
    doc: dict[str, Any] = {"inputs": [entry for entry, _ in pairs]}
    if draw(st.booleans()):
        doc["outputs"] = draw(
            st.lists(
                st.fixed_dictionaries(
                    {"name": st.sampled_from(["INPUT0", "INPUT1", "nope"])},
                    optional={
                        "parameters": st.dictionaries(
                            st.sampled_from(["binary_data", "classification"]), json_values
                        )
                    },
                ),
                max_size=3,
            )
            | json_values
        )
    for key in ("id", "parameters"):
        if draw(st.booleans()):
            doc[key] = draw(json_values)
    header = json.dumps(doc).encode()
    binary = b"".join(raw for _, raw in pairs)
    if not binary and draw(st.booleans()):
        return header, None
    length = draw(st.sampled_from([len(header), 0, len(header) + 1]) | st.integers(-2, 300))
    return header + binary, length


def _echo(request: Any) -> InferResponse:
    """The response an identity model gives: every input back as an output of its name."""
    outputs = [InferTensor(t.name, t.datatype, t.shape, t.data) for t in request.inputs]
    return InferResponse("fuzz", "1", outputs)


@fuzz_target(_bodies())
def _decode_then_encode(case: tuple[bytes, int | None]) -> None:
    body, header_length = case
    try:
        request = decode_infer_request(
            body, header_length=header_length, model_name="fuzz", model_version="",
            max_json_depth=MAX_DEPTH,
        )  # fmt: skip
    except ServingError:
        return
    if request.raw_input is not None:
        return
    try:
        encoded = encode_infer_response(_echo(request), request)
    except ServingError:
        return
    assert isinstance(encoded.body, bytes)


test_v2_request_decode_and_echo, test_v2_request_decode_and_echo_long = _decode_then_encode


@st.composite
def _encoded(draw: st.DrawFn) -> tuple[bytes, str | None]:
    raw = draw(st.binary(max_size=512))
    encoding = draw(st.sampled_from([None, "gzip", "deflate", "identity", "br", "gzip, deflate"]))
    if encoding == "gzip" and draw(st.booleans()):
        raw = gzip.compress(raw)[: draw(st.integers(0, len(raw) + 40))]
    if encoding == "deflate" and draw(st.booleans()):
        raw = zlib.compress(raw)[: draw(st.integers(0, len(raw) + 20))]
    return raw, encoding


@fuzz_target(_encoded())
def _content_then_json(case: tuple[bytes, str | None]) -> None:
    raw, encoding = case
    try:
        parse_json(decode_content(raw, encoding, limit=4096), max_depth=MAX_DEPTH)
    except ServingError:
        return


test_body_decoding, test_body_decoding_long = _content_then_json


@fuzz_target(st.integers(1, 40_000), st.sampled_from([b"[", b'{"a":']))
def _deep_json(depth: int, opener: bytes) -> None:
    """Nesting past the limit is a ServingError (JsonTooDeep), never a RecursionError."""
    try:
        parse_json(opener * depth, max_depth=MAX_DEPTH)
    except ServingError:
        return


test_deep_json_is_refused, test_deep_json_is_refused_long = _deep_json
