"""The proxy's upstream client against a scripted raw-socket replica: framing, reuse, failure."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from activator.errors import UpstreamFailed, UpstreamTimeout
from activator.surfaces.upstream import Connection, ResponseHead, UpstreamPool
from tests.fakes.loop import HUNG_AFTER_S, eventually

Reply = Callable[[asyncio.StreamWriter], Awaitable[None]]
SMALL = 1024


def send(data: bytes, *, piece: int = 0, close: bool = False) -> Reply:
    """Write `data` (in `piece`-byte writes with a pause between, so the client sees every
    split), then keep the connection open unless `close`."""

    async def reply(writer: asyncio.StreamWriter) -> None:
        step = piece or len(data) or 1
        for i in range(0, len(data), step):
            writer.write(data[i : i + step])
            await writer.drain()
            if piece:
                await asyncio.sleep(0.001)
        if close:
            writer.close()

    return reply


def reset_after(data: bytes) -> Reply:
    async def reply(writer: asyncio.StreamWriter) -> None:
        writer.write(data)
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.transport.abort()

    return reply


async def hang(writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(3600)


@dataclass
class Replica:
    """A raw HTTP/1.1 server answering the n-th request it reads with the n-th reply."""

    replies: list[Reply]
    url: str = ""
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                await self.replies.pop(0)(writer)
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@pytest.fixture
async def replica() -> AsyncIterator[Replica]:
    r = Replica([])
    server = await asyncio.start_server(r.serve, "127.0.0.1", 0)
    r.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    yield r
    server.close()


@pytest.fixture
async def pool() -> AsyncIterator[UpstreamPool]:
    p = UpstreamPool(small_body=SMALL)
    yield p
    await p.close()


async def exchange(
    pool: UpstreamPool, url: str, *, method: str = "POST", timeout_s: float = HUNG_AFTER_S
) -> tuple[ResponseHead, bytes, Connection]:
    """One request; the response head and its whole body, read the way the proxy does."""
    conn = await pool.connect(url, timeout_s=timeout_s)
    try:
        conn.begin(timeout_s=timeout_s, head_request=method == "HEAD")
        conn.send(f"{method} /x HTTP/1.1\r\nHost: r\r\nContent-Length: 2\r\n\r\nhi".encode())
        head = await conn.response()
        body = head.body
        if body is None:
            parts = []
            while chunk := await conn.read():
                parts.append(chunk)
            body = b"".join(parts)
        return head, body, conn
    finally:
        pool.release(conn)


OK_SMALL = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"


async def test_a_small_response_comes_whole_and_the_connection_is_reused(
    pool: UpstreamPool, replica: Replica
) -> None:
    replica.replies = [send(OK_SMALL), send(OK_SMALL, piece=3)]
    for _ in range(2):
        head, _, _ = await exchange(pool, replica.url)
        assert (head.status, head.reason, head.body) == (200, "OK", b"hello")
        assert head.headers["Content-Type"] == "text/plain"
        assert "Content-Length" not in head.headers  # the body is handed over whole
    assert replica.connections == 1
    assert pool.idle_count(replica.url) == 1
    assert replica.requests[0].startswith(b"POST /x HTTP/1.1\r\n")


async def test_a_big_response_streams_and_keeps_its_length(
    pool: UpstreamPool, replica: Replica
) -> None:
    payload = bytes(range(256)) * 40
    head_bytes = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(payload)
    replica.replies = [send(head_bytes + payload, piece=700), send(OK_SMALL)]
    head, body, _ = await exchange(pool, replica.url)
    assert head.body is None and body == payload
    assert head.headers["Content-Length"] == str(len(payload))
    await exchange(pool, replica.url)
    assert replica.connections == 1


@pytest.mark.parametrize("piece", [0, 1, 5])
async def test_chunked_response_split_anywhere_with_extensions_and_trailers(
    pool: UpstreamPool, replica: Replica, piece: int
) -> None:
    wire = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Keep: yes\r\n\r\n"
        b"5;name=value\r\nhello\r\n1A\r\n" + b"z" * 26 + b"\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    replica.replies = [send(wire, piece=piece), send(OK_SMALL)]
    head, body, _ = await exchange(pool, replica.url)
    assert body == b"hello" + b"z" * 26
    assert "Transfer-Encoding" not in head.headers and head.headers["X-Keep"] == "yes"
    _, body, _ = await exchange(pool, replica.url)
    assert body == b"hello" and replica.connections == 1


@pytest.mark.parametrize(
    ("wire", "method"),
    [
        (b"HTTP/1.1 204 No Content\r\n\r\n", "POST"),
        (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n", "POST"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", "HEAD"),
    ],
)
async def test_responses_without_a_body_end_at_their_head(
    pool: UpstreamPool, replica: Replica, wire: bytes, method: str
) -> None:
    replica.replies = [send(wire), send(OK_SMALL)]
    head, body, _ = await exchange(pool, replica.url, method=method)
    assert body == b"" and head.body is None
    if method == "HEAD":
        assert head.headers["Content-Length"] == "10"  # what a GET would have carried
    _, body, _ = await exchange(pool, replica.url)
    assert body == b"hello" and replica.connections == 1


async def test_interim_100_continue_is_skipped(pool: UpstreamPool, replica: Replica) -> None:
    replica.replies = [send(b"HTTP/1.1 100 Continue\r\n\r\n" + OK_SMALL, piece=4)]
    head, body, _ = await exchange(pool, replica.url)
    assert (head.status, body) == (200, b"hello")


async def test_connection_close_and_until_close_bodies_are_not_reused(
    pool: UpstreamPool, replica: Replica
) -> None:
    closing = (
        b"HTTP/1.1 200 OK\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\nContent-Length: 2\r\n\r\nok"
    )
    until_eof = b"HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\nall of this until EOF"
    replica.replies = [send(closing, close=True), send(until_eof, piece=7, close=True)]
    head, body, _ = await exchange(pool, replica.url)
    assert body == b"ok" and "X-Hop" not in head.headers and "Connection" not in head.headers
    assert pool.idle_count(replica.url) == 0
    head, body, _ = await exchange(pool, replica.url)
    assert body == b"all of this until EOF" and head.headers["X-A"] == "1"
    assert replica.connections == 2 and pool.idle_count(replica.url) == 0


async def test_an_idle_connection_the_replica_closed_is_not_reused(
    pool: UpstreamPool, replica: Replica
) -> None:
    replica.replies = [send(OK_SMALL, close=True), send(OK_SMALL)]
    # Closed right after a complete, keep-alive-looking answer: the pool notices the EOF.
    await exchange(pool, replica.url)
    await eventually(lambda: pool.idle_count(replica.url) == 0)
    assert pool.idle_count(replica.url) == 0
    _, body, _ = await exchange(pool, replica.url)
    assert body == b"hello" and replica.connections == 2


async def test_bytes_past_the_response_are_never_reused(
    pool: UpstreamPool, replica: Replica
) -> None:
    replica.replies = [send(OK_SMALL + b"HTTP/1.1 200 OK\r\n"), send(OK_SMALL)]
    _, body, conn = await exchange(pool, replica.url)
    assert body == b"hello" and not conn.reusable
    assert pool.idle_count(replica.url) == 0


async def test_reset_before_answering_is_upstream_failed(
    pool: UpstreamPool, replica: Replica
) -> None:
    replica.replies = [reset_after(b"HTTP/1.1 200 OK\r\nContent-Le")]
    with pytest.raises(UpstreamFailed, match="before answering"):
        await exchange(pool, replica.url)


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",  # small: never handed over whole
    ],
)
async def test_reset_mid_body_fails_the_read_never_a_short_body(
    pool: UpstreamPool, replica: Replica, head: bytes
) -> None:
    replica.replies = [reset_after(head + b"x" * 50)]
    with pytest.raises(UpstreamFailed, match="mid-response"):
        await exchange(pool, replica.url)
    assert pool.idle_count(replica.url) == 0


async def test_no_answer_by_the_deadline_is_upstream_timeout(
    pool: UpstreamPool, replica: Replica
) -> None:
    replica.replies = [hang]
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(UpstreamTimeout):
        await asyncio.wait_for(exchange(pool, replica.url, timeout_s=0.1), HUNG_AFTER_S)
    assert loop.time() - start >= 0.1  # waited for the deadline, not failed at once
    assert pool.idle_count(replica.url) == 0


@pytest.mark.parametrize(
    "wire",
    [
        b"HTTQ/1.1 200 OK\r\n\r\n",
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Header: 1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n folded: 1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n",
    ],
)
async def test_bad_framing_is_upstream_failed(
    pool: UpstreamPool, replica: Replica, wire: bytes
) -> None:
    replica.replies = [send(wire)]
    with pytest.raises(UpstreamFailed, match=r"bad|longer"):
        await exchange(pool, replica.url)
    assert pool.idle_count(replica.url) == 0


async def test_an_endless_head_is_refused(pool: UpstreamPool, replica: Replica) -> None:
    replica.replies = [send(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000)]
    with pytest.raises(UpstreamFailed, match="head over"):
        await exchange(pool, replica.url)


async def test_nobody_listening_is_upstream_failed(pool: UpstreamPool) -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(UpstreamFailed, match="connection failed"):
        await pool.connect(
            f"http://127.0.0.1:{port}", timeout_s=HUNG_AFTER_S
        )  # refused, not timed out


async def test_a_connection_idle_past_the_timeout_is_replaced(replica: Replica) -> None:
    now = [0.0]
    pool = UpstreamPool(small_body=SMALL, idle_timeout_s=30.0, clock=lambda: now[0])
    replica.replies = [send(OK_SMALL), send(OK_SMALL), send(OK_SMALL)]
    try:
        await exchange(pool, replica.url)
        now[0] = 29.0
        await exchange(pool, replica.url)
        assert replica.connections == 1
        now[0] = 60.0  # idle for 31 s: the replica may be closing it right now
        await exchange(pool, replica.url)
        assert replica.connections == 2
    finally:
        await pool.close()
