from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from thawserver.chunked_over_length import (
    MAX_HELD_BODY_BYTES,
    awaits_more,
    prefer_chunked,
    settle,
)

BODY = b"4\r\nabcd\r\n0\r\n\r\n"


def _head(*lines: str, request_line: str = "POST /v2/models/m/infer HTTP/1.1") -> bytes:
    return ("\r\n".join([request_line, "Host: x", *lines]) + "\r\n\r\n").encode()


@pytest.mark.parametrize(
    "lines",
    [
        ("Content-Length: 14", "Transfer-Encoding: chunked"),
        ("Transfer-Encoding: chunked", "content-length:14"),
        ("CONTENT-LENGTH:   14  ", "Transfer-Encoding: Chunked"),
        ("Connection: keep-alive", "Content-Length: 14", "Transfer-Encoding: chunked"),
    ],
)
def test_a_length_beside_chunked_becomes_close_and_no_byte_moves(lines: tuple[str, ...]) -> None:
    data = _head(*lines) + BODY
    rewritten = prefer_chunked(data)
    assert rewritten is not None and len(rewritten) == len(data)
    assert rewritten.endswith(BODY)
    head = rewritten[: rewritten.index(b"\r\n\r\n")].decode().split("\r\n")
    assert not [h for h in head if h.lower().startswith("content-length")]
    assert [h.split(":")[1].strip() for h in head if h.startswith("Connection:")][-1] == "close"
    # every other line is unchanged, in its place
    before = data.decode().split("\r\n")
    after = rewritten.decode().split("\r\n")
    changed = [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if b != a]
    assert len(changed) == 1 and before[changed[0]].lower().startswith("content-length")


@pytest.mark.parametrize(
    "data",
    [
        # the framings disagree on where the request ends: what smuggling is made of
        _head("Content-Length: 0", "Transfer-Encoding: chunked") + BODY,
        _head("Content-Length: 13", "Transfer-Encoding: chunked") + BODY,
        _head("Content-Length: 40", "Transfer-Encoding: chunked") + BODY + b"GET / HTTP/1.1\r\n",
        _head("Content-Length: 14", "Transfer-Encoding: chunked") + BODY + b"GET / HTTP/1.1\r\n",
        _head("Content-Length: 14", "Transfer-Encoding: chunked") + BODY[:9],  # not all here
        _head("Content-Length: 19", "Transfer-Encoding: chunked") + b"4;x=y\r\nabcd\r\n0\r\n\r\n",
        _head("Content-Length: 21", "Transfer-Encoding: chunked")
        + b"4\r\nabcd\r\n0\r\nX: y\r\n\r\n",
        _head("Content-Length: 14", "Transfer-Encoding: gzip, chunked") + BODY,
        _head("Content-Length: 14") + BODY,  # no transfer coding: nothing to do
        _head("Transfer-Encoding: chunked") + BODY,  # no length: nothing to do
        _head("Content-Length: 14", "Content-Length: 14", "Transfer-Encoding: chunked"),
        _head("Content-Length: 1, 2", "Transfer-Encoding: chunked"),
        _head("Content-Length: -1", "Transfer-Encoding: chunked"),
        _head("Content-Length: 14", "Transfer-Encoding: chunked, gzip"),  # chunked not last
        _head("Content-Length: 14", "Transfer-Encoding: chunked", request_line="POST / HTTP/1.0"),
        _head("Content-Length: 14", "Transfer-Encoding: chunked", request_line="POST  / HTTP/1.1"),
        _head("Content-Length: 14", "Transfer-Encoding:", " chunked"),  # folded
        _head("Content-Length: 14", "X: a\nTransfer-Encoding: chunked"),  # bare LF
        _head("Content-Length: 14", "X: a\rb", "Transfer-Encoding: chunked"),  # bare CR
        _head("Content-Length: 14", "Transfer-Encoding chunked"),  # no colon
        b"POST / HTTP/1.1\r\nContent-Length: 14\r\nTransfer-Encoding: chunked\r\n",  # head cut
        b"4\r\nabcd\r\n0\r\n\r\n",  # not a head at all
    ],
)
def test_anything_else_is_left_to_the_parser(data: bytes) -> None:
    assert prefer_chunked(data) is None


def test_a_head_past_the_limit_is_left_to_the_parser() -> None:
    big = _head("X-Pad: " + "a" * 17_000, "Content-Length: 14", "Transfer-Encoding: chunked")
    assert prefer_chunked(big + BODY) is None


_LINES = st.sampled_from(
    [
        "Content-Length: 14",
        "content-length:3",
        "Transfer-Encoding: chunked",
        "transfer-encoding: gzip",
        "Connection: keep-alive",
        "X-A: b",
        " folded",
        "Content-Length: 1,2",
    ]
)


@given(st.lists(_LINES, max_size=6), st.binary(max_size=64))
def test_a_rewrite_never_moves_a_byte(lines: list[str], tail: bytes) -> None:
    data = _head(*lines) + tail
    rewritten = prefer_chunked(data)
    if rewritten is not None:
        assert len(rewritten) == len(data) and rewritten.endswith(tail)
        assert rewritten.split(b"\r\n")[0] == data.split(b"\r\n")[0]


@given(st.binary(max_size=512))
def test_arbitrary_bytes_are_left_or_rewritten_in_place(data: bytes) -> None:
    rewritten = prefer_chunked(data)
    assert rewritten is None or len(rewritten) == len(data)


_BOTH = _head("Content-Length: 14", "Transfer-Encoding: chunked")


@pytest.mark.parametrize(
    "data",
    [
        _BOTH,  # the head alone: `requests` writes the body apart
        _BOTH + BODY[:9],  # the body cut
        _BOTH[: _BOTH.index(b"chunked")],  # the head cut in its coding
        _BOTH[:20],  # the head cut before it names a framing
        b"GET / HTTP/1.1\r\nHost: x\r\n",  # any head not whole yet
    ],
)
def test_a_candidate_not_all_here_is_held(data: bytes) -> None:
    assert awaits_more(data) and prefer_chunked(data) is None
    rest = (_BOTH + BODY)[len(data) :] if (_BOTH + BODY).startswith(data) else None
    if rest is not None:  # once the rest arrives, the rewrite is decided
        assert not awaits_more(data + rest) and prefer_chunked(data + rest) is not None


@pytest.mark.parametrize(
    "data",
    [
        _BOTH + BODY,  # all here: rewritten at once
        _head("Transfer-Encoding: chunked") + b"4\r\nab",  # a plain chunked stream: no length
        _head("Content-Length: 14") + b"4\r\n",  # no transfer coding
        _head("Content-Length: 14", "Transfer-Encoding: gzip, chunked"),  # not a candidate
        _head(f"Content-Length: {MAX_HELD_BODY_BYTES + 1}", "Transfer-Encoding: chunked"),
        b"POST / HTTP/1.1\r\nX: " + b"a" * 17_000,  # a head past the limit: the parser's
    ],
)
def test_anything_else_is_not_held(data: bytes) -> None:
    assert not awaits_more(data)


def _settled_the_old_way(data: bytes) -> bytes | None:
    """What the guard did before `settle`: hold while awaits_more, else the rewrite or as is."""
    return None if awaits_more(data) else (prefer_chunked(data) or data)


_SETTLE_CASES = [
    _BOTH + BODY,
    _BOTH,
    _BOTH + BODY[:9],
    _BOTH[:20],
    _head("Content-Length: 14") + b"4\r\n",
    _head("transfer-encoding: chunked", "content-length: 14") + BODY,
    _head("TRANSFER-ENCODING: chunked", "CONTENT-LENGTH: 14") + BODY,
    b"GET / HTTP/1.1\r\nHost: x\r\n",
    b"POST / HTTP/1.1\r\nX: " + b"a" * 17_000,
]


@pytest.mark.parametrize("data", _SETTLE_CASES)
def test_settle_is_awaits_more_then_prefer_chunked(data: bytes) -> None:
    assert settle(data) == _settled_the_old_way(data)


@given(st.binary(max_size=512))
def test_settle_agrees_on_arbitrary_bytes(data: bytes) -> None:
    assert settle(data) == _settled_the_old_way(data)
