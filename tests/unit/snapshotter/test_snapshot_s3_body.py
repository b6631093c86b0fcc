"""Reading S3 bodies straight from the socket into caller memory (`stores.s3_body`), against a
real local HTTP server through urllib3 and botocore's `StreamingBody`, as boto3 does."""

from __future__ import annotations

import gzip
import itertools
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import urllib3
from botocore.exceptions import IncompleteReadError, ReadTimeoutError, ResponseStreamingError
from botocore.response import StreamingBody

from snapshotter.stores.s3_body import direct_stream, read_body_into

BODY = bytes(range(256)) * 4099  # ~1 MiB, not a multiple of any piece size


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/plain":
            self._send(BODY, {})
        elif self.path == "/gzip":
            self._send(gzip.compress(BODY), {"Content-Encoding": "gzip"})
        elif self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for off in range(0, len(BODY), 100_000):
                piece = BODY[off : off + 100_000]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        elif self.path in ("/short", "/reset"):
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY[: len(BODY) // 3])
            self.wfile.flush()
            if self.path == "/reset":  # RST instead of FIN
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
            self.close_connection = True
        elif self.path == "/stall":
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY[:1000])
            self.wfile.flush()
            self.server.release.wait(10)  # type: ignore[attr-defined]
            self.close_connection = True

    def _send(self, data: bytes, headers: dict[str, str]) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.release = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.release.set()  # type: ignore[attr-defined]
    httpd.shutdown()
    httpd.server_close()


def get(pool: urllib3.PoolManager, url: str) -> StreamingBody:
    """What botocore hands out as `get_object(...)["Body"]`."""
    raw = pool.request("GET", url, preload_content=False, decode_content=False)
    return StreamingBody(raw, raw.headers.get("Content-Length"))


def test_plain_body_lands_directly_and_the_connection_is_reused(server: str) -> None:
    pool = urllib3.PoolManager(maxsize=1, timeout=urllib3.Timeout(connect=2, read=2))
    for _ in range(3):
        body = get(pool, server + "/plain")
        assert direct_stream(body, len(BODY)) is not None
        assert direct_stream(body, len(BODY) - 1) is None  # a length mismatch: not direct
        dest = bytearray(len(BODY))
        read_body_into(body, memoryview(dest), piece_bytes=1 << 16)
        assert dest == BODY
        assert body._raw_stream._connection is None  # handed back to the pool
        body.close()
    conns = pool.connection_from_url(server)
    assert conns.num_connections == 1  # one TCP connection served all three


def test_a_checksum_validating_body_is_never_bypassed(server: str) -> None:
    class ValidatingBody(StreamingBody):  # stands in for botocore's StreamingChecksumBody
        pass

    pool = urllib3.PoolManager()
    raw = pool.request("GET", server + "/plain", preload_content=False, decode_content=False)
    body = ValidatingBody(raw, raw.headers.get("Content-Length"))
    assert direct_stream(body, len(BODY)) is None
    dest = bytearray(len(BODY))
    read_body_into(body, memoryview(dest), piece_bytes=1 << 16)
    assert dest == BODY


@pytest.mark.parametrize("path", ["/chunked", "/gzip"])
def test_framed_or_encoded_bodies_take_the_public_path(server: str, path: str) -> None:
    pool = urllib3.PoolManager()
    body = get(pool, server + path)
    assert direct_stream(body, len(BODY)) is None
    raw_len = len(gzip.compress(BODY)) if path == "/gzip" else len(BODY)
    dest = bytearray(raw_len)
    read_body_into(body, memoryview(dest), piece_bytes=1 << 16)
    assert (gzip.decompress(dest) if path == "/gzip" else bytes(dest)) == BODY


@pytest.mark.parametrize("path", ["/short", "/reset"])
def test_a_body_cut_short_raises_a_retryable_streaming_error(server: str, path: str) -> None:
    pool = urllib3.PoolManager()
    body = get(pool, server + path)
    assert direct_stream(body, len(BODY)) is not None
    with pytest.raises((IncompleteReadError, ResponseStreamingError)):
        read_body_into(body, memoryview(bytearray(len(BODY))), piece_bytes=1 << 16)
    assert body._raw_stream._connection is None or body._raw_stream.closed


def test_a_stalled_body_raises_botocores_read_timeout(server: str) -> None:
    pool = urllib3.PoolManager(timeout=urllib3.Timeout(connect=2, read=0.3))
    body = get(pool, server + "/stall")
    with pytest.raises(ReadTimeoutError):
        read_body_into(body, memoryview(bytearray(len(BODY))), piece_bytes=1 << 16)


class CutBody:
    """A streaming body that delivers `cut` bytes, then fails like a connection reset."""

    def __init__(self, data: bytes, cut: int | None) -> None:
        self.data, self.cut, self.pos = data, cut, 0

    def readinto(self, b: memoryview) -> int:
        if self.cut is not None and self.pos >= self.cut:
            raise ResponseStreamingError(error="connection reset by peer")
        end = len(self.data) if self.cut is None else self.cut
        n = min(len(b), end - self.pos, 3000)
        b[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n

    def close(self) -> None:
        pass


class ResettingClient:
    """`get_object` over `data`; the first GET of every range is cut after 10000 bytes."""

    def __init__(self, data: bytes) -> None:
        self.data, self.ranges, self.lock = data, [], threading.Lock()
        self.seen_ends: set[int] = set()

    def get_object(self, *, Bucket: str, Key: str, Range: str) -> dict[str, Any]:
        start, end = (int(x) for x in Range.removeprefix("bytes=").split("-"))
        with self.lock:
            self.ranges.append((start, end))
            first = end not in self.seen_ends
            self.seen_ends.add(end)
        body = self.data[start : end + 1]
        return {"ContentLength": len(body), "Body": CutBody(body, 10000 if first else None)}


def test_a_reset_range_resumes_where_it_stopped_and_lands_each_byte_once() -> None:
    from snapshotter.stores.s3_store import S3Config, S3Store

    data = bytes(range(256)) * 1000  # 256000 bytes: four 64000-byte ranges
    client = ResettingClient(data)
    config = S3Config(max_parallel=2, range_bytes=64000, land_bytes=4096, stream_retries=2)
    store = S3Store("s3://bucket/prefix", config, client=client)
    landed: list[tuple[int, int]] = []
    lock = threading.Lock()

    def on_bytes(offset: int, nbytes: int) -> None:
        with lock:
            landed.append((offset, nbytes))

    dest = bytearray(len(data))
    store.read_chunk_into("ab" * 32, memoryview(dest), on_bytes=on_bytes)
    assert dest == data
    covered = sorted(landed)
    assert sum(n for _, n in covered) == len(data)
    assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(covered))
    assert max(n for _, n in covered) == 4096  # handed on piece by piece, not per range
    retries = sorted(r for r in client.ranges if r[0] % 64000)
    assert retries == [(off + 10000, off + 63999) for off in range(0, len(data), 64000)]
