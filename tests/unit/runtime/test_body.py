"""Request bodies: the byte cap holds on the wire and after decompression; JSON depth is capped."""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from collections.abc import AsyncIterator

import pytest

from runtime.codecs.body import (
    decode_content,
    json_depth,
    parse_json,
    read_capped,
    too_deep,
    too_large,
)
from runtime.errors import InvalidInput, JsonTooDeep, PayloadTooLarge, UnsupportedEncoding


async def _stream(*chunks: bytes) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def _exploding() -> AsyncIterator[bytes]:
    raise AssertionError("the body must not be read when its declared length is over the cap")
    yield b""  # pragma: no cover


async def test_chunks_under_the_cap_are_joined_in_order() -> None:
    body = await read_capped(_stream(b"ab", b"cd", b"e"), limit=5, declared_length=None)
    assert body == b"abcde"


async def test_chunked_body_over_the_cap_is_refused_while_streaming() -> None:
    with pytest.raises(PayloadTooLarge, match="maximum allowed input size of 5 bytes"):
        await read_capped(_stream(b"abc", b"def"), limit=5, declared_length=None)


async def test_declared_length_over_the_cap_is_refused_before_reading() -> None:
    with pytest.raises(PayloadTooLarge):
        await read_capped(_exploding(), limit=5, declared_length=6)


@pytest.mark.parametrize("coding", ["gzip", "x-gzip", "GZIP"])
def test_gzip_body_is_decoded(coding: str) -> None:
    assert decode_content(gzip.compress(b"hello" * 100), coding, limit=1000) == b"hello" * 100


def test_deflate_accepts_zlib_and_raw_streams() -> None:
    payload = b'{"inputs": []}' * 50
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    raw_stream = raw.compress(payload) + raw.flush()
    assert decode_content(zlib.compress(payload), "deflate", limit=10_000) == payload
    assert decode_content(raw_stream, "deflate", limit=10_000) == payload


def test_gzip_bomb_is_refused_quickly_at_the_cap() -> None:
    bomb = gzip.compress(bytes(200 * 1024 * 1024), compresslevel=9)  # 200 MiB of zeros
    assert len(bomb) < 1024 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(PayloadTooLarge):
            decode_content(bomb, "gzip", limit=4 * 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Stopped at the cap: never inflated whole (200 MiB), whatever the machine's speed.
    assert peak < 3 * 4 * 1024 * 1024, f"{peak} bytes allocated"


def test_decoded_body_exactly_at_the_cap_is_accepted() -> None:
    assert len(decode_content(gzip.compress(bytes(4096)), "gzip", limit=4096)) == 4096


@pytest.mark.parametrize(
    ("raw", "coding", "message"),
    [
        (gzip.compress(b"x" * 1000)[:-12], "gzip", "truncated"),
        (gzip.compress(b"x") + b"junk", "gzip", "trailing"),
        (b"not compressed at all", "gzip", "not valid compressed"),
    ],
)
def test_broken_compressed_bodies_are_bad_input(raw: bytes, coding: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        decode_content(raw, coding, limit=1 << 20)


def test_a_coding_other_than_gzip_or_deflate_is_tritons_501() -> None:
    with pytest.raises(UnsupportedEncoding) as info:
        decode_content(b"abc", "br", limit=1 << 20)
    assert info.value.message == "Unsupported compression type"
    assert (info.value.status, info.value.accept_encoding) == (501, "gzip, deflate")


def test_identity_body_is_returned_as_is() -> None:
    assert decode_content(b"abc", None, limit=10) == b"abc"
    assert decode_content(b"abc", "identity", limit=10) == b"abc"


def test_deep_json_is_bad_input_not_recursion_error() -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(InvalidInput, match=r"maximum allowed limit \(64\)"):
        parse_json(deep, max_depth=64)


def test_json_at_the_depth_cap_parses() -> None:
    text = b"[" * 64 + b"1" + b"]" * 64
    assert json_depth(text) == 64
    value = parse_json(text, max_depth=64)
    for _ in range(63):
        value = value[0]
    assert value == [1]


def test_brackets_inside_strings_do_not_count_towards_depth() -> None:
    doc = {"id": "[" * 500 + '\\"{', "inputs": [[1, 2], [3, 4]]}
    text = json.dumps(doc).encode()
    assert json_depth(text) == 3
    assert parse_json(text, max_depth=4) == doc


def test_many_shallow_brackets_are_fine() -> None:
    rows = [[i, i + 1] for i in range(10_000)]
    assert parse_json(json.dumps({"data": rows}).encode(), max_depth=4) == {"data": rows}


@pytest.mark.parametrize("text", [b"{", b"{'a': 1}", b"\xff\xfe\x00", b"", b"[1,]", b"NaNx"])
def test_malformed_json_is_bad_input(text: bytes) -> None:
    with pytest.raises(InvalidInput, match="not valid JSON"):
        parse_json(text, max_depth=64)


def test_depth_error_uses_tritons_text_and_names_the_member() -> None:
    deep = b'{"id": "x[[", "inputs": ' + b"[" * 120 + b"1" + b"]" * 120 + b"}"
    with pytest.raises(JsonTooDeep) as err:
        parse_json(deep, max_depth=100)
    assert err.value.message == "JSON nesting depth exceeds maximum allowed limit (100)"
    assert err.value.member == "inputs"


_DEEP = b"[" * 200 + b"]" * 200


@pytest.mark.parametrize(
    ("text", "member"),
    [
        (b'{"ready":' + b"[" * 250_000 + b"true" + b"]" * 250_000 + b"}", "ready"),
        (b'{"a": {"b": "]"}, "re\\u0061dy" : [{}, ' + _DEEP + b"]}", "ready"),
        (b'{"a": [' + b'"s",' * 2000 + _DEEP + b"]}", "a"),
        (_DEEP, None),  # not an object: no member to name
        (b'{"pad": [' + b'"s",' * 2000 + b'"s"], "ready": ' + _DEEP + b"}", None),  # too far in
    ],
)
def test_the_member_that_nests_too_deep_is_named_when_cheap(
    text: bytes, member: str | None
) -> None:
    error = too_deep(text, 100)
    assert error is not None and error.member == member
    assert too_deep(b'{"a": ' + b"[" * 99 + b"]" * 99 + b"}", 100) is None


@pytest.mark.parametrize(
    ("size", "what", "message"),
    [
        (
            12,
            "request JSON",
            "request JSON size of 12 bytes exceeds the maximum allowed input size of 10 bytes",
        ),
        (None, "request", "request size exceeds the maximum allowed input size of 10 bytes"),
    ],
)
def test_over_the_cap_is_413_in_tritons_words(size: int | None, what: str, message: str) -> None:
    error = too_large(10, size=size, what=what)
    assert error.status == 413
    assert error.message.startswith(message)
    assert "--max-body-bytes" in error.message


def test_decompressed_body_over_the_cap_says_so() -> None:
    with pytest.raises(PayloadTooLarge, match="decompressed request JSON size exceeds"):
        decode_content(gzip.compress(b"x" * 100), "gzip", limit=10, what="request JSON")
