"""An S3 fault-injection proxy (aiohttp, own thread) for the snapshotter's integration tests.

It sits between boto3 and a moto server and, for GETs of chunk objects, can answer 503
SlowDown, reset the connection mid-body, stall mid-body, serve a truncated object, or answer
403 AccessDenied, 404 NoSuchKey or 500 InternalError.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass, field

from aiohttp import ClientSession, web

BUCKET = "thaw-images"
SLOWDOWN_XML = b"<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>"
# Error answers a GET can be given instead of the object: mode -> (status, S3 error code).
ERROR_ANSWERS = {
    "403": (403, "AccessDenied"),
    "404": (404, "NoSuchKey"),
    "500": (500, "InternalError"),
}
DROP_HEADERS = ("content-length", "transfer-encoding", "connection", "server", "date")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Faults:
    """What the proxy does to the next matching GETs of chunk objects."""

    mode: str = "none"  # none | slowdown | reset | stall | truncate | 403 | 404 | 500
    remaining: int = 0  # requests still to fault; -1: every one
    where: str = "/chunks/"  # which objects' GETs are faulted (a key fragment: "/images/")
    stall_s: float = 30.0
    chunk_gets: int = 0
    faulted: int = 0
    log: list[str] = field(default_factory=list)  # the paths faulted, in order
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, mode: str, count: int = -1, *, where: str = "/chunks/") -> None:
        with self.lock:
            self.mode, self.remaining, self.faulted, self.where = mode, count, 0, where
            self.log = []

    def take(self, path: str, method: str) -> str:
        with self.lock:
            if method != "GET":
                return "none"
            if "/chunks/" in path:
                self.chunk_gets += 1
            if self.where not in path:
                return "none"
            if self.mode == "none" or self.remaining == 0:
                return "none"
            self.remaining -= 1 if self.remaining > 0 else 0
            self.faulted += 1
            self.log.append(path)
            return self.mode


class FaultProxy:
    """An aiohttp reverse proxy (own thread + loop) between boto3 and moto that injects faults."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.faults = Faults()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        self._session = ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        for task in asyncio.all_tasks():  # stalled handlers still sleeping
            if task is not asyncio.current_task():
                task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        fault = self.faults.take(request.path, request.method)
        if fault == "slowdown":
            body = SLOWDOWN_XML
            return web.Response(status=503, body=body, content_type="application/xml")
        if fault in ERROR_ANSWERS:
            status, code = ERROR_ANSWERS[fault]
            body = f"<Error><Code>{code}</Code><Message>{code}</Message></Error>".encode()
            return web.Response(status=status, body=body, content_type="application/xml")
        assert self._session is not None
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")
        }
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=await request.read(),
        ) as upstream:
            body = await upstream.read()
            out_headers = {
                k: v for k, v in upstream.headers.items() if k.lower() not in DROP_HEADERS
            }
            if request.method == "HEAD" and "Content-Length" in upstream.headers:
                out_headers["Content-Length"] = upstream.headers["Content-Length"]
        return await self._respond(request, fault, upstream.status, out_headers, body)

    async def _respond(
        self, request: web.Request, fault: str, status: int, headers: dict[str, str], body: bytes
    ) -> web.StreamResponse:
        if fault == "truncate":
            body = body[: len(body) // 2]
        if fault in ("reset", "stall"):
            response = web.StreamResponse(status=status, headers=headers)
            response.content_length = len(body)
            await response.prepare(request)
            await response.write(body[: len(body) // 2])
            if fault == "stall":
                await asyncio.sleep(self.faults.stall_s)
            assert request.transport is not None
            request.transport.abort()
            return response
        return web.Response(status=status, headers=headers, body=body)
