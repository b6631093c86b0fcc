"""Kept-alive connections the activator serves move to a replica at a request boundary
(activator.direct.move_over): the pure rule, the byte tally that finds request boundaries,
and a real aiohttp server on loopback whose answers carry `Connection: close` exactly where
a client may reconnect."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from activator.direct.move_over import MAX_HEAD_BYTES, MoveOver, Tally, moves
from tests.fakes.loop import HUNG_AFTER_S

GET = b"GET /v2/models/m/ready HTTP/1.1\r\nHost: x\r\n\r\n"
POST_HEAD = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"


# ---- the rule ---------------------------------------------------------------------------


def test_a_connection_moves_only_when_every_condition_holds() -> None:
    ok = {"model": "m", "settled": True, "keep_alive": True, "age_s": 2.0, "min_age_s": 1.0}
    assert moves(**ok)  # type: ignore[arg-type]
    for key, value in [
        ("model", None),  # the front door would serve a new connection here too
        ("settled", False),  # a pipelined request, or a body not all read
        ("keep_alive", False),  # closing anyway: nothing to move
        ("age_s", 0.5),  # too young: a disagreement must not loop the client
    ]:
        assert not moves(**{**ok, key: value}), key  # type: ignore[arg-type]


# ---- the tally ----------------------------------------------------------------------------


def test_requests_one_after_another_are_each_settled() -> None:
    tally = Tally(0.0)
    tally.feed(GET)
    tally.begin(body_bytes=0)
    assert tally.settled()
    tally.feed(POST_HEAD + b"01234")  # the body in two reads
    tally.begin(body_bytes=10)
    assert not tally.settled()
    tally.feed(b"56789")
    assert tally.settled()


def test_a_head_in_pieces_is_found() -> None:
    tally = Tally(0.0)
    tally.feed(GET[:10])
    tally.feed(GET[10:])
    tally.begin(body_bytes=0)
    assert tally.settled()


def test_a_pipelined_request_whole_or_in_part_is_not_settled() -> None:
    for extra in (GET, GET[:7], b"P"):
        tally = Tally(0.0)
        tally.feed(GET + extra)  # the next request came in the same read
        tally.begin(body_bytes=0)
        assert not tally.settled(), extra
    tally = Tally(0.0)
    tally.feed(POST_HEAD + b"0123456789" + GET)
    tally.begin(body_bytes=10)
    assert not tally.settled()
    tally.begin(body_bytes=0)  # the pipelined one, now being served: nothing after it
    assert tally.settled()


def test_bytes_after_the_request_began_unsettle_it() -> None:
    tally = Tally(0.0)
    tally.feed(GET)
    tally.begin(body_bytes=0)
    tally.feed(b"GET /v2")  # the client sent its next request before reading this answer
    assert not tally.settled()
    tally.feed(b"/models/m/ready HTTP/1.1\r\nHost: x\r\n\r\n")
    tally.begin(body_bytes=0)
    assert tally.settled()


def test_a_chunked_body_or_a_head_too_long_stops_the_tally_for_good() -> None:
    tally = Tally(0.0)
    tally.feed(b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    tally.begin(body_bytes=None)
    tally.feed(GET)
    tally.begin(body_bytes=0)
    assert tally.lost and not tally.settled()
    tally = Tally(0.0)
    tally.feed(b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n")
    tally.begin(body_bytes=0)
    assert tally.lost and not tally.settled()


def test_a_large_body_is_counted_not_kept() -> None:
    body = b"x" * (4 * MAX_HEAD_BYTES)
    tally = Tally(0.0)
    tally.feed(b"POST /x HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:100])
    tally.begin(body_bytes=len(body))
    tally.feed(body[100:])
    assert tally.settled()
    tally.feed(GET)
    tally.begin(body_bytes=0)
    assert tally.settled()


def test_a_body_read_with_its_head_and_more_past_the_kept_bytes_is_not_trusted() -> None:
    body = b"x" * (2 * MAX_HEAD_BYTES)
    head = b"POST /x HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body)
    tally = Tally(0.0)
    tally.feed(head + body + GET)  # past the kept bytes: where the next one starts is unknown
    tally.begin(body_bytes=len(body))
    assert tally.lost and not tally.settled()


# ---- a real server on loopback ------------------------------------------------------------


class _Server:
    def __init__(self, moves_over: MoveOver, port: int, moved: Counter) -> None:
        self.moves_over, self.port, self.moved = moves_over, port, moved

    def count(self) -> float:
        return self.moved.labels("m")._value.get()


@pytest.fixture
async def server() -> AsyncIterator[_Server]:
    """An app with the move-over hooks whose every connection is tallied; the front door's
    rule says `/v2/models/m/...` would be handed off, anything else not."""
    moves_over = MoveOver(min_age_s=0.0)
    app = web.Application(middlewares=[moves_over.middleware])
    moves_over.install(app)

    async def ok(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text="ok")

    app.router.add_route("*", "/{tail:.*}", ok)
    moved = Counter("moved", "moved", ["model"], registry=CollectorRegistry())
    moves_over.attach(
        lambda method, target: "m" if target.startswith("/v2/models/m/") else None, moved
    )
    runner = web.AppRunner(app)
    await runner.setup()
    assert runner.server is not None
    factory = runner.server
    listener = await asyncio.get_running_loop().create_server(
        lambda: moves_over.wrap(factory()), "127.0.0.1", 0
    )
    port = listener.sockets[0].getsockname()[1]
    yield _Server(moves_over, port, moved)
    listener.close()
    await runner.cleanup()


async def _exchange(port: int, *sends: bytes, answers: int) -> list[bytes]:
    """Send each of `sends` (one write each), then read `answers` responses' heads; the
    connection's end is read as b"" after them."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for data in sends:
            writer.write(data)
            await writer.drain()
        heads = []
        for _ in range(answers):
            async with asyncio.timeout(HUNG_AFTER_S):
                head = await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(2)  # "ok"
            heads.append(head)
        try:
            heads.append(await asyncio.wait_for(reader.read(1), 0.3))
        except TimeoutError:
            heads.append(b"<open>")
        return heads
    finally:
        writer.close()


async def test_a_model_request_on_a_kept_alive_connection_closes_it(server: _Server) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
    first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\nok"), HUNG_AFTER_S)
    assert b"Connection: close" not in first  # not a model path: stays
    writer.write(GET)
    second = await asyncio.wait_for(reader.readuntil(b"\r\n\r\nok"), HUNG_AFTER_S)
    assert b"Connection: close" in second
    assert await asyncio.wait_for(reader.read(1), HUNG_AFTER_S) == b""  # closed after it
    writer.close()
    assert server.count() == 1


async def test_a_body_read_whole_then_closes(server: _Server) -> None:
    heads = await _exchange(server.port, POST_HEAD, b"0123456789", answers=1)
    assert b"Connection: close" in heads[0] and heads[1] == b""
    assert server.count() == 1


@pytest.mark.parametrize("second", [GET, GET[:9]], ids=["whole", "in part"])
async def test_a_pipelined_sequence_is_never_cut(server: _Server, second: bytes) -> None:
    """The next request sent before the answer (in the same write): the answer keeps the
    connection; the close rides on the answer after which nothing was sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(GET + second)
    first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\nok"), HUNG_AFTER_S)
    assert b"Connection: close" not in first
    writer.write(GET[len(second) :] if second != GET else b"")
    last = await asyncio.wait_for(reader.readuntil(b"\r\n\r\nok"), HUNG_AFTER_S)
    assert b"Connection: close" in last
    assert await asyncio.wait_for(reader.read(1), HUNG_AFTER_S) == b""
    writer.close()
    assert server.count() == 1


async def test_a_young_connection_is_not_moved(server: _Server) -> None:
    server.moves_over.min_age_s = 60.0
    heads = await _exchange(server.port, GET, answers=1)
    assert b"Connection: close" not in heads[0] and heads[1] == b"<open>"
    assert server.count() == 0


async def test_without_the_front_doors_rule_nothing_moves() -> None:
    moves_over = MoveOver(min_age_s=0.0)  # never attached (`--http-restricted-api`)
    app = web.Application(middlewares=[moves_over.middleware])
    moves_over.install(app)
    app.router.add_get("/{tail:.*}", _ok)
    runner = web.AppRunner(app)
    await runner.setup()
    assert runner.server is not None
    factory = runner.server
    listener = await asyncio.get_running_loop().create_server(
        lambda: moves_over.wrap(factory()), "127.0.0.1", 0
    )
    try:
        heads = await _exchange(listener.sockets[0].getsockname()[1], GET, answers=1)
        assert b"Connection: close" not in heads[0] and heads[1] == b"<open>"
    finally:
        listener.close()
        await runner.cleanup()


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")
