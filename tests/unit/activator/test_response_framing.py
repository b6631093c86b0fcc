"""Response framing decisions and chunked decoding, as pure functions over bytes."""

from __future__ import annotations

import pytest

from activator.errors import UpstreamFailed
from activator.surfaces.response_framing import (
    ChunkedDecoder,
    Frame,
    Framing,
    HeadCache,
    frame_response,
    parse_head,
)


def frame(raw: bytes, *, head_request: bool = False, small: int = 100) -> Frame:
    status, reason, fields, http10 = parse_head(raw)
    return frame_response(
        status, reason, fields, head_request=head_request, small=small, http10=http10
    )


def test_chunked_wins_over_a_length_and_such_a_connection_is_not_reused() -> None:
    f = frame(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: gzip, chunked")
    assert f.framing == Framing.CHUNKED and not f.keep_alive
    assert "Content-Length" not in f.head.headers


def test_a_final_coding_other_than_chunked_reads_until_close() -> None:
    f = frame(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip")
    assert f.framing == Framing.UNTIL_CLOSE and not f.keep_alive


def test_http_1_0_style_answer_without_length_reads_until_close() -> None:
    assert frame(b"HTTP/1.0 200 OK\r\nX: 1").framing == Framing.UNTIL_CLOSE


def test_http_1_0_keeps_its_connection_only_when_it_says_so() -> None:
    assert not frame(b"HTTP/1.0 200 OK\r\nContent-Length: 0").keep_alive
    assert frame(b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0").keep_alive
    assert frame(b"HTTP/1.1 200 OK\r\nContent-Length: 0").keep_alive


def test_small_and_big_lengths() -> None:
    small, big = (
        frame(b"HTTP/1.1 200 OK\r\nContent-Length: 100"),
        frame(b"HTTP/1.1 200 OK\r\nContent-Length: 101"),
    )
    assert small.whole and "Content-Length" not in small.head.headers
    assert not big.whole and big.head.headers["Content-Length"] == "101" and big.length == 101


def test_head_keeps_its_length_and_has_no_body() -> None:
    f = frame(b"HTTP/1.1 200 OK\r\nContent-Length: 7", head_request=True)
    assert f.framing == Framing.NONE and f.head.headers["Content-Length"] == "7"


def test_connection_named_headers_and_hop_by_hop_ones_are_dropped() -> None:
    f = frame(
        b"HTTP/1.1 200 OK\r\nConnection: X-A\r\nX-A: 1\r\nKeep-Alive: t=5\r\n"
        b"X-B: 2\r\nContent-Length: 0"
    )
    assert list(f.head.headers.items()) == [("X-B", "2")] and f.keep_alive


def test_chunked_body_fed_one_byte_at_a_time() -> None:
    wire = b"4\r\nWiki\r\n5;x=y\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nT: 1\r\n\r\n"
    decoder = ChunkedDecoder()
    body = b"".join(b"".join(decoder.feed(wire[i : i + 1])) for i in range(len(wire)))
    assert body == b"Wikipedia in\r\n\r\nchunks." and decoder.done and not decoder.extra


def test_bytes_after_the_last_chunk_are_flagged() -> None:
    decoder = ChunkedDecoder()
    assert decoder.feed(b"1\r\na\r\n0\r\n\r\nHTTP/1.1") == [b"a"]
    assert decoder.done and decoder.extra


@pytest.mark.parametrize("wire", [b"-1\r\n", b"\r\n", b"1\r\nab\r\n", b"1" * 70_000])
def test_bad_chunks_fail(wire: bytes) -> None:
    with pytest.raises(UpstreamFailed):
        ChunkedDecoder().feed(wire)


def test_a_repeated_head_is_parsed_once_and_each_response_gets_its_own_head() -> None:
    cache = HeadCache(small=100, max_entries=2)
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: 1"
    first, second = cache.frame(raw, head_request=False), cache.frame(raw, head_request=False)
    assert first is not None and second is not None and len(cache) == 1
    first.head.body = b"abc"
    assert second.head.body is None and second.head.headers["X-A"] == "1"
    with pytest.raises(TypeError):
        first.head.headers["X-A"] = "2"  # type: ignore[index]  # shared, so read-only
    assert cache.frame(b"HTTP/1.1 100 Continue", head_request=False) is None
    cache.frame(b"HTTP/1.1 204 No Content", head_request=False)
    assert len(cache) <= 2  # bounded: it starts over when full
