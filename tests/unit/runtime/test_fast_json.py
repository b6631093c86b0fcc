"""fast_json: orjson's speed, the stdlib's answers (values accepted, values written)."""

from __future__ import annotations

import json
import math

import pytest

from thawserver import fast_json

ACCEPTED = [
    b'{"inputs":[{"name":"A","shape":[2],"datatype":"FP32","data":[1.5,-2e-7]}]}',
    b"[NaN, Infinity, -Infinity]",  # the stdlib accepts these; orjson does not
    b"123456789012345678901234567890",  # past 64 bits
    b'"\\ud800"',  # a lone surrogate
    b'\xef\xbb\xbf{"bom": true}',  # UTF-8 byte order mark
    '{"utf16": 1}'.encode("utf-16"),
    b'{"a": 1, "a": 2}',  # duplicate keys: the last wins
    b'{"text": "caf\\u00e9 \xe2\x82\xac"}',
    b"[1e400, -0, -0.0, 1E5, 0.1e1, 18446744073709551615, -9223372036854775809]",
    b'{"id": "12345678901234567890123", "n": [99999999999999999999]}',
    b"-9223372036854775809",  # just past int64: orjson alone would round it to a float
    b"18446744073709551616",  # just past uint64
]


@pytest.mark.parametrize("text", ACCEPTED)
def test_loads_gives_what_the_stdlib_gives(text: bytes) -> None:
    got, want = fast_json.loads(text), json.loads(text)
    assert repr(got) == repr(want)  # repr: NaN != NaN, but both print as nan


@pytest.mark.parametrize("text", [b"{", b"[1,]", b"\xff\xfe\x00", b"", b"nul", b'"a\nb"'])
def test_loads_refuses_what_the_stdlib_refuses(text: bytes) -> None:
    with pytest.raises(ValueError):
        fast_json.loads(text)


@pytest.mark.parametrize(
    "value",
    [
        {"model_name": "m", "outputs": [{"data": [0.1, 1e-05, 1e16, -0.0, 3]}]},
        {"text": "café €", "none": None, "flag": True},
        [math.nan, math.inf, -math.inf],  # orjson would write null
        2**70,
        {1: "non-str key"},
        "\ud800",
    ],
)
def test_dumps_means_what_the_stdlib_writes(value: object) -> None:
    got = fast_json.dumps(value)
    want = json.dumps(value, separators=(",", ":")).encode()
    assert repr(json.loads(got)) == repr(json.loads(want))


def test_dumps_is_compact() -> None:
    assert fast_json.dumps({"a": [1, 2.5], "b": {"c": "d"}}) == b'{"a":[1,2.5],"b":{"c":"d"}}'
