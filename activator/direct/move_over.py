"""Keep-alive connections the activator serves, moved to a replica once one can take them.

The front door routes a client connection once, at its first request (activator.direct.
front_door): one opened while its model was cold (or held requests, or whose first request was
a server path) stays on the activator's path for as long as the client keeps it alive — 16
keep-alive clients opened at zero made 21 037 requests in 30 s, every one through the
activator. Once the front door would hand a new connection for the request's model to a
replica, the response to the next request on such a connection carries `Connection: close`:
HTTP/1.1 clients (tritonclient.http, requests, aiohttp) open a new connection for their next
request, which the front door hands off (`thaw_direct_moves_total`).

It never breaks a request: the close rides on a complete response, only of a request read
whole after which no byte of another one has arrived (a pipelining client's next request,
parsed or not, would be lost with the connection). `Tally` counts each connection's bytes and
finds where each request ends (its head, then its `Content-Length`); a chunked body, a head it
cannot find, anything unclear: that connection is never closed here. A connection younger
than `MIN_AGE_S` (1 s) is not moved, so that a client is never looped through reconnects where the
front door and this rule disagree (a handoff that fails: the new connection is served here).

    Tally (per connection, inside the guard) ── bytes ──▶ aiohttp's handler
    MoveOver.middleware: a request begins ──▶ Tally.begin (where it ends)
    MoveOver on_response_prepare ──▶ moves(...) ──▶ response.force_close()

`moves` is the pure decision; `MoveOver` holds the hooks and the tallies.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import cast

from aiohttp import web
from prometheus_client import Counter

from thawserver.aiohttp_compat import has_queued_requests

__all__ = ["MIN_AGE_S", "MoveOver", "Tally", "moves"]

logger = logging.getLogger(__name__)

MIN_AGE_S = 1.0
"""A connection served here is moved at most this long after its accept (seconds)."""
MAX_HEAD_BYTES = 64 * 1024
"""Bytes of a request's start kept to find its head's end; a longer head: never moved."""

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_Target = Callable[[str, str], str | None]


def moves(
    *, model: str | None, settled: bool, keep_alive: bool, age_s: float, min_age_s: float
) -> bool:
    """Whether the response being prepared closes its connection so that the client reconnects
    and is handed off: the front door would hand a new connection for the request to a replica
    of `model` now (None: it would not), the request was read whole with nothing after it
    (`settled`), the connection is kept alive otherwise, and it is `min_age_s` old."""
    return model is not None and settled and keep_alive and age_s >= min_age_s


class Tally:
    """Where one connection's requests end, from the bytes its server reads (no I/O here).

    `received` counts every byte passed on; `begin` is told that the server parsed the next
    request and its body length, and finds where that request ends (its head's end in the
    bytes kept from its start, plus the body). `settled()`: the current request has arrived
    whole and not a byte after it. Once anything is unclear (`lost`), it stays unsettled."""

    __slots__ = ("_kept", "_start", "_truncated", "lost", "opened_at", "received")

    def __init__(self, opened_at: float) -> None:
        self.opened_at = opened_at
        self.received = 0
        self.lost = False
        self._start = 0  # where the next request not yet begun starts (an offset in the stream)
        self._kept = bytearray()  # the bytes from `_start` on, up to MAX_HEAD_BYTES
        self._truncated = False  # bytes from `_start` on were not kept (past MAX_HEAD_BYTES)

    def feed(self, data: bytes) -> None:
        """`data` reached the server."""
        offset, self.received = self.received, self.received + len(data)
        if self.lost or self._truncated or self.received <= self._start:
            return  # nothing lost is ever kept again; bytes before `_start` are a body's
        piece = data[max(0, self._start - offset) :]
        room = MAX_HEAD_BYTES - len(self._kept)
        if len(piece) > room:
            piece, self._truncated = piece[:room], True
        self._kept += piece

    def begin(self, *, body_bytes: int | None) -> None:
        """The server parsed the next request; its body is `body_bytes` long (None: not
        framed by a length, e.g. chunked: the stream is not followed further)."""
        if self.lost:
            return
        head_end = self._kept.find(b"\r\n\r\n")
        if body_bytes is None or head_end < 0:
            self._lose()
            return
        length = head_end + 4 + body_bytes
        end = self._start + length
        if self._truncated and self.received > end:
            self._lose()  # bytes of what follows it were not kept
            return
        self._start = end
        del self._kept[:length]
        self._truncated = False

    def settled(self) -> bool:
        """The current request has arrived whole, and no byte after it."""
        return not self.lost and self.received == self._start

    def _lose(self) -> None:
        self.lost = True
        self._kept = bytearray()


class _Counted(asyncio.Protocol):
    """A connection's protocol, its received bytes told to its `Tally` first."""

    __slots__ = ("_moves", "_transport", "inner", "tally")

    def __init__(self, moves: MoveOver, inner: asyncio.Protocol, tally: Tally) -> None:
        self._moves = moves
        self.inner = inner
        self.tally = tally
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._moves._tallies[transport] = self.tally
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.tally.feed(data)
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._moves._tallies.pop(self._transport, None)
        self.inner.connection_lost(exc)


class MoveOver:
    """Moves the activator's keep-alive connections to replicas (see the module docstring).

    `install` it in the app (before the app starts), `wrap` each connection the front door
    serves here, and `attach` the front door's rule: `target(method, target)` is the
    model a new connection whose request is that would be handed to now, or None."""

    def __init__(self, *, min_age_s: float = MIN_AGE_S) -> None:
        self.min_age_s = min_age_s
        self._tallies: dict[asyncio.BaseTransport, Tally] = {}
        self._attached: tuple[_Target, Counter] | None = None

    def install(self, app: web.Application) -> None:
        app.on_response_prepare.append(self._on_response_prepare)

    def attach(self, target: _Target, moved: Counter) -> None:
        """Connections are moved from now on; each one counted in `moved` (by model)."""
        self._attached = (target, moved)

    def wrap(self, protocol: asyncio.Protocol) -> asyncio.Protocol:
        """`protocol`, its connection's requests followed (made at its accept)."""
        now = asyncio.get_running_loop().time()
        return _Counted(self, protocol, Tally(now))

    @web.middleware
    async def middleware(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        """A request begins: its connection's tally learns where it ends."""
        transport = request.transport
        tally = self._tallies.get(transport) if transport is not None else None
        if tally is not None:
            chunked = "Transfer-Encoding" in request.headers
            tally.begin(body_bytes=None if chunked else request.content_length or 0)
        return await handler(request)

    async def _on_response_prepare(
        self, request: web.Request, response: web.StreamResponse
    ) -> None:
        transport = request.transport
        tally = self._tallies.get(transport) if transport is not None else None
        if self._attached is None or tally is None or tally.lost:
            return
        target, moved = self._attached
        age_s = asyncio.get_running_loop().time() - tally.opened_at
        # The cheap checks first: the front door's rule looks at the model's replicas.
        settled = tally.settled() and request.content.is_eof()
        keep_alive = response.keep_alive is not False and request.keep_alive
        if not (settled and keep_alive and age_s >= self.min_age_s):
            return
        if has_queued_requests(cast(asyncio.BaseProtocol, request.protocol)):
            return  # a pipelined request is parsed already (the tally says so too)
        model = target(request.method, request.raw_path)
        if moves(
            model=model, settled=settled, keep_alive=keep_alive, age_s=age_s,
            min_age_s=self.min_age_s,
        ):  # fmt: skip
            # The hook runs after aiohttp chose the headers: say it, and close after it.
            response.headers["Connection"] = "close"
            response.force_close()
            moved.labels(model).inc()
            logger.debug("model=%s: a kept-alive connection moves to a replica", model)
