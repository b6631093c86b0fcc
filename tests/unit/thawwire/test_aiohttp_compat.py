"""Pins the aiohttp behaviour thawserver.aiohttp_compat relies on, against the installed aiohttp.

If an aiohttp release changes any of it, these fail, naming what moved: a request aiohttp
cannot parse must still reach `RequestHandler.handle_error` (answered in JSON by
`JsonErrorRunner`, whose server keeps every handler argument of the runner's), and a
pipelining client's parsed requests must still be visible (`has_queued_requests`).
"""

from __future__ import annotations

import asyncio
import gzip
import inspect
import json
import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from thawserver import aiohttp_compat
from thawserver.aiohttp_compat import JsonErrorRunner, has_queued_requests

RAN = web.AppKey("ran", list)


@pytest.fixture
async def port() -> AsyncIterator[int]:
    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read())

    async def boom(request: web.Request) -> web.Response:
        raise RuntimeError("a bug no middleware catches")

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        app[RAN].append("startup")
        yield
        app[RAN].append("cleanup")

    app = web.Application()
    app[RAN] = []
    app.router.add_post("/echo", echo)
    app.router.add_get("/boom", boom)
    app.cleanup_ctx.append(lifecycle)
    # Handler arguments the runner must pass on: a short request line, no decompression.
    runner = JsonErrorRunner(app, max_line_size=200, auto_decompress=False, access_log=None)
    await runner.setup()
    assert app[RAN] == ["startup"]  # the app's own lifecycle, as with web.AppRunner
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield runner.addresses[0][1]
    await runner.cleanup()
    assert app[RAN] == ["startup", "cleanup"]


async def _raw(port: int, data: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        status_line, *lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (x.split(":", 1) for x in lines if x)}
        body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 5)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # and the connection ends
        return int(status_line.split()[1]), headers, body
    finally:
        writer.close()


@pytest.mark.parametrize(
    "data",
    [
        b"GARBAGE\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40 + b"\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"GET /" + b"a" * 300 + b" HTTP/1.1\r\n\r\n",  # over the runner's max_line_size=200
    ],
)
async def test_unparsable_requests_are_answered_in_json(port: int, data: bytes) -> None:
    status, headers, body = await _raw(port, data)
    assert status == 400
    assert headers["content-type"] == "application/json"  # the connection ended: see _raw
    error = json.loads(body)["error"]
    assert isinstance(error, str) and error and "\n" not in error


async def test_unparsable_requests_log_no_traceback_above_debug(
    port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    for data in (
        b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
        b"GET /" + b"a" * 300 + b" HTTP/1.1\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    ):
        assert (await _raw(port, data))[0] == 400
    loud = [r for r in caplog.records if r.levelno > logging.DEBUG or r.exc_info]
    assert not loud, [r.getMessage() for r in loud]
    assert any("unparsable request" in r.getMessage() for r in caplog.records)


async def test_an_exception_past_every_middleware_is_a_json_500(port: int) -> None:
    status, headers, body = await _raw(port, b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (status, headers["content-type"]) == (500, "application/json")
    assert json.loads(body) == {"error": "500 Internal Server Error Server got itself in trouble"}


async def test_the_app_is_served_with_the_runners_handler_arguments(port: int) -> None:
    packed = gzip.compress(b"hello")
    async with aiohttp.ClientSession(auto_decompress=False) as s:
        headers = {"Content-Encoding": "gzip"}
        async with s.post(f"http://127.0.0.1:{port}/echo", data=packed, headers=headers) as r:
            assert r.status == 200
            assert await r.read() == packed  # auto_decompress=False reached the handler
        async with s.get(f"http://127.0.0.1:{port}/nowhere") as r:
            assert r.status == 404  # routing and the app's own answers are untouched


async def test_pipelined_requests_are_seen_queued() -> None:
    seen: list[bool] = []

    async def first(request: web.Request) -> web.Response:
        await asyncio.sleep(0.05)  # the second request arrives and is parsed meanwhile
        seen.append(has_queued_requests(request.protocol))
        return web.Response(text="1")

    async def second(request: web.Request) -> web.Response:
        seen.append(has_queued_requests(request.protocol))
        return web.Response(text="2")

    app = web.Application()
    app.router.add_get("/1", first)
    app.router.add_get("/2", second)
    runner = JsonErrorRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", runner.addresses[0][1])
        writer.write(b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(2):
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200")
            await reader.readexactly(1)
        writer.close()
    finally:
        await runner.cleanup()
    assert seen == [True, False]
    assert not has_queued_requests(asyncio.Protocol())  # no such queue: nothing queued


async def _expecting(port: int, expect: str, *, body: bytes = b"ab") -> tuple[int, bytes]:
    """Status and body of a POST /echo with `Expect: <expect>`, its body sent at once."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = f"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: {expect}\r\n"
        writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        status_line = await asyncio.wait_for(reader.readline(), 5)
        if b" 100 " in status_line:
            await asyncio.wait_for(reader.readline(), 5)  # the interim answer's blank line
            status_line = await asyncio.wait_for(reader.readline(), 5)
        head_lines = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        length = next(
            int(line.split(b":")[1]) for line in head_lines.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )  # fmt: skip
        return int(status_line.split()[1]), await reader.readexactly(length)
    finally:
        writer.close()


async def test_an_unknown_expectation_is_ignored_as_triton_ignores_it(port: int) -> None:
    # aiohttp's default answers 417 "Unknown Expect: 200-ok" in text/plain before any
    # middleware; Triton 2.51 serves the request.
    assert await _expecting(port, "200-ok") == (200, b"ab")
    assert await _expecting(port, "100-continue") == (200, b"ab")  # still the interim 100
    assert await _expecting(port, "100-Continue") == (200, b"ab")


async def test_responses_name_the_server_without_versions(port: int) -> None:
    # aiohttp's default is "Python/3.11 aiohttp/3.x.y"; Triton sends no Server field.
    async with aiohttp.ClientSession() as session:
        for path in ("/", "/nope"):
            async with session.get(f"http://127.0.0.1:{port}{path}") as resp:
                assert resp.headers.getall("Server") == [aiohttp_compat.SERVER_NAME]
    # An unparsable request's JSON answer too.
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nBad Header\r\n\r\n")
    head = (await reader.read(4096)).split(b"\r\n\r\n", 1)[0]
    writer.close()
    assert b"Server: thaw" in head.split(b"\r\n") and b"aiohttp" not in head, head


def test_the_private_names_have_the_shapes_relied_on() -> None:
    """Clear failures for an aiohttp that renamed what the behaviour tests above exercise."""
    handler_class = aiohttp_compat.RequestHandler
    params = list(inspect.signature(handler_class.handle_error).parameters)
    assert params == ["self", "request", "status", "exc", "message"]
    assert inspect.iscoroutinefunction(web.AppRunner._make_server)
    init = inspect.signature(web.Server.__init__).parameters
    assert {"request_factory", "handler_cancellation", "loop", "kwargs"} <= set(init)
    # The request factory's first argument is the parsed message (aiohttp's C or Python one).
    factory = list(inspect.signature(web.Application._make_request).parameters)
    assert factory[:2] == ["self", "message"]
    for name in ("_replace", "headers", "raw_headers"):
        assert hasattr(aiohttp.http.RawRequestMessage, name), name
    assert "_messages" in handler_class.__slots__
    assert isinstance(getattr(aiohttp.web_response, "SERVER_SOFTWARE", None), str)
