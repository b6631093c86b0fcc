"""thawserver.connection_guard around a real aiohttp server on loopback: the head deadline (408
and close, or a silent close before any byte), the idle keep-alive timeout, a long handler
never cut off, the connection cap's 503; and the pure pieces (`expiry`, the limits' ranges,
the gRPC options)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from tests.fakes.loop import HUNG_AFTER_S, eventually
from thawserver.aiohttp_compat import JsonErrorRunner
from thawserver.connection_drain import count_down_connections
from thawserver.connection_guard import CloseReason, ConnectionGuard, Phase, expiry
from thawserver.connection_limits import (
    ConnectionLimits,
    grpc_max_concurrent_rpcs,
    grpc_server_options,
    out_of_range,
)

Serve = Callable[[ConnectionLimits], Awaitable[tuple[int, ConnectionGuard]]]
GET = b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    cleanups: list[Callable[[], Awaitable[None]]] = []

    async def start(limits: ConnectionLimits) -> tuple[int, ConnectionGuard]:
        async def hello(request: web.Request) -> web.Response:
            return web.Response(text="hello")

        async def slow(request: web.Request) -> web.Response:
            await asyncio.sleep(float(request.query["s"]))
            return web.Response(text="slow")

        guard = ConnectionGuard(limits)
        app = web.Application(middlewares=[guard.middleware])
        app.router.add_get("/hello", hello)
        app.router.add_get("/slow", slow)
        runner = JsonErrorRunner(app, access_log=None)
        await runner.setup()
        assert runner.server is not None
        listener = await asyncio.get_running_loop().create_server(
            guard.protocol_factory(runner.server), "127.0.0.1", 0
        )

        async def stop() -> None:
            listener.close()
            await runner.cleanup()

        cleanups.append(stop)
        return listener.sockets[0].getsockname()[1], guard

    yield start
    for stop in cleanups:
        await stop()


async def _read_all(reader: asyncio.StreamReader, within_s: float) -> bytes:
    """Everything the server sends until it closes; TimeoutError if it does not close."""
    data = b""
    async with asyncio.timeout(within_s):
        while chunk := await reader.read(65536):
            data += chunk
    return data


async def test_a_head_trickled_past_the_deadline_is_408_and_closed(serve: Serve) -> None:
    port, guard = await serve(ConnectionLimits(head_timeout_s=0.5))
    started = time.monotonic()  # before the connect: the deadline starts at the accept, later
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    reading = asyncio.ensure_future(_read_all(reader, HUNG_AFTER_S))
    sent = 0
    for byte in GET[:20]:  # 1 s or more for 20 bytes: past the 0.5 s deadline
        if reading.done():
            break
        writer.write(bytes([byte]))
        sent += 1
        await asyncio.sleep(0.05)  # the subject: a client trickling its head
    data = await reading
    elapsed = time.monotonic() - started
    writer.close()
    assert data.startswith(b"HTTP/1.1 408"), data
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"Connection: close" in head
    assert "request head not received in 0.5 s" in json.loads(body)["error"]
    assert elapsed > 0.4  # not before the deadline (a loaded machine only adds)
    assert sent < 20  # cut off while still trickling: by the deadline, not by the head's end
    assert guard.closed[CloseReason.HEAD_TIMEOUT] == 1


async def test_a_connection_that_never_sends_is_closed_silently(serve: Serve) -> None:
    port, guard = await serve(ConnectionLimits(head_timeout_s=0.3))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert await _read_all(reader, HUNG_AFTER_S) == b""
    writer.close()
    assert guard.closed[CloseReason.HEAD_TIMEOUT] == 1


async def test_without_a_head_deadline_a_trickling_client_stays_connected(serve: Serve) -> None:
    port, guard = await serve(ConnectionLimits(head_timeout_s=0))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(GET[:5])
    with pytest.raises(TimeoutError):
        await _read_all(reader, 1.0)
    writer.close()
    assert guard.closed[CloseReason.HEAD_TIMEOUT] == 0


async def test_a_handler_longer_than_the_head_deadline_is_not_cut_off(serve: Serve) -> None:
    # The head is due 1 s after the accept (a head sent at once arrives in milliseconds, but a
    # loaded machine can stall the loop for longer than a shorter deadline); the handler
    # outlasts that deadline.
    port, _ = await serve(ConnectionLimits(head_timeout_s=1.0, idle_timeout_s=5))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /slow?s=2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    data = await _read_all(reader, HUNG_AFTER_S)
    writer.close()
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"slow")


async def test_keep_alive_requests_each_get_a_fresh_head_deadline(serve: Serve) -> None:
    # Each head, sent at once, is due 1 s after the accept or its first byte: more than a
    # loaded machine stalls the loop for (0.4 s before was not).
    port, _ = await serve(ConnectionLimits(head_timeout_s=1.0, idle_timeout_s=5))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(3):  # 3 x 0.6 s idle between requests: longer than one head deadline
        writer.write(GET)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HUNG_AFTER_S)
        assert head.startswith(b"HTTP/1.1 200")
        await reader.readexactly(5)
        await asyncio.sleep(0.6)
    writer.close()


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(
    serve: Serve,
) -> None:
    port, guard = await serve(ConnectionLimits(head_timeout_s=10, idle_timeout_s=0.5))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    asked = time.monotonic()  # the idle clock starts once the answer is out, later
    writer.write(GET)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HUNG_AFTER_S)
    assert head.startswith(b"HTTP/1.1 200")
    # Then EOF: the server closed it (the head deadline is off while idle: the idle one did).
    assert await _read_all(reader, HUNG_AFTER_S) == b"hello"
    assert time.monotonic() - asked > 0.4  # not before the idle timeout
    writer.close()
    assert guard.closed[CloseReason.IDLE_TIMEOUT] == 1


async def test_draining_answers_close_and_an_idle_connection_goes_at_the_shorter_timeout(
    serve: Serve,
) -> None:
    port, guard = await serve(ConnectionLimits(head_timeout_s=10, idle_timeout_s=60))
    busy_reader, busy = await asyncio.open_connection("127.0.0.1", port)
    idle_reader, idle = await asyncio.open_connection("127.0.0.1", port)
    for reader, writer in ((busy_reader, busy), (idle_reader, idle)):
        writer.write(GET)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HUNG_AFTER_S)
        assert b"Connection: close" not in head  # kept alive before the stop
        await reader.readexactly(5)
    draining_since = time.monotonic()
    guard.start_draining(idle_timeout_s=0.5)
    busy.write(GET)  # its next request is answered, and the answer closes the connection
    head = await asyncio.wait_for(busy_reader.readuntil(b"\r\n\r\n"), HUNG_AFTER_S)
    assert head.startswith(b"HTTP/1.1 200") and b"Connection: close" in head
    assert await _read_all(busy_reader, HUNG_AFTER_S) == b"hello"
    # The idle one is closed at the shorter timeout, not the 60 s of its limits.
    assert await _read_all(idle_reader, HUNG_AFTER_S) == b""
    assert time.monotonic() - draining_since < HUNG_AFTER_S
    await eventually(lambda: guard.open == 0)
    assert guard.closed[CloseReason.IDLE_TIMEOUT] == 1
    busy.close()
    idle.close()


async def test_count_down_logs_each_second_and_returns_what_is_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    slept: list[float] = []
    open_connections = [2]

    async def sleep(seconds: float) -> None:  # a stepped clock: the last client leaves at 1.5 s
        slept.append(seconds)
        if sum(slept) >= 1.5:
            open_connections[0] = 0

    with caplog.at_level(logging.INFO):
        left = await count_down_connections(lambda: open_connections[0], 30, sleep=sleep)
    assert [r.getMessage() for r in caplog.records] == [
        "Timeout 30: Found 2 HTTP service connections",
        "Timeout 29: Found 2 HTTP service connections",
    ]
    assert left == 28  # two seconds begun of 30
    assert await count_down_connections(lambda: 0, 30, sleep=sleep) == 30
    assert await count_down_connections(lambda: 1, 2, sleep=sleep) == 0  # never left: all used


async def test_past_the_cap_a_new_connection_is_503_and_closed(serve: Serve) -> None:
    port, guard = await serve(ConnectionLimits(head_timeout_s=10, max_connections=2))
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    await eventually(lambda: guard.open == 2, timeout_s=10)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(GET)
    data = await _read_all(reader, HUNG_AFTER_S)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503")
    assert b"Connection: close" in head and b"Retry-After: 1" in head
    assert "2 connections" in json.loads(body)["error"]
    assert guard.closed[CloseReason.OVER_LIMIT] == 1
    # A held connection still serves, and one closed frees its place.
    r0, w0 = held[0]
    w0.write(GET)
    head = await asyncio.wait_for(r0.readuntil(b"\r\n\r\n"), HUNG_AFTER_S)
    assert head.startswith(b"HTTP/1.1 200")
    for _, w in held:
        w.close()
    await eventually(lambda: guard.open == 0, timeout_s=10)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    assert (await _read_all(reader, HUNG_AFTER_S)).startswith(b"HTTP/1.1 200")
    writer.close()


def test_expiry_is_per_phase_and_zero_is_off() -> None:
    limits = ConnectionLimits(head_timeout_s=10, idle_timeout_s=75)
    assert expiry(Phase.HEAD, 100.0, limits) == 110.0
    assert expiry(Phase.IDLE, 100.0, limits) == 175.0
    assert expiry(Phase.REQUEST, 100.0, limits) is None
    off = ConnectionLimits(head_timeout_s=0, idle_timeout_s=0)
    assert expiry(Phase.HEAD, 1.0, off) is None and expiry(Phase.IDLE, 1.0, off) is None


def test_limits_out_of_range_name_the_flag_value_and_range() -> None:
    assert out_of_range(ConnectionLimits()) is None
    assert out_of_range(ConnectionLimits(0, 0, 0)) is None  # each off
    problem = out_of_range(ConnectionLimits(head_timeout_s=0.01), {"head_timeout_s": "--h"})
    assert problem == "`--h` = 0.01, must be 0 (off) or in [0.1, 3600]"
    assert out_of_range(ConnectionLimits(idle_timeout_s=float("nan"))) is not None
    assert out_of_range(ConnectionLimits(max_connections=-1)) is not None


def test_grpc_options_carry_the_same_limits() -> None:
    options = dict(grpc_server_options(ConnectionLimits(2.5, 75, 100)))
    assert options == {
        "grpc.server_handshake_timeout_ms": 2500,
        "grpc.max_connection_idle_ms": 75_000,
        "grpc.max_allowed_incoming_connections": 100,
    }
    assert grpc_max_concurrent_rpcs(ConnectionLimits(max_connections=100)) == 100
    off = ConnectionLimits(0, 0, 0)
    assert grpc_server_options(off) == [] and grpc_max_concurrent_rpcs(off) is None
