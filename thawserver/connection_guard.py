"""Deadlines for slow and idle clients and a cap on open connections, around the asyncio protocol
an HTTP/1.1 server makes for each connection (aiohttp's handler, here).

aiohttp has no deadline for a request's head: a client that sends one byte a second holds its
connection, and the memory behind it, for as long as it likes. `ConnectionGuard` wraps each
connection's protocol and tells three phases of a connection apart from two public signals
only, bytes arriving (`data_received`) and a request's handler running (`middleware`):

    HEAD     waiting for a request's head: since the accept, or since the first byte after an
             idle spell. Past `head_timeout_s` it is answered 408 and closed (closed silently
             when not a byte came).
    REQUEST  a handler runs: no deadline here. The body's deadline is the handler's (it reads
             the body and answers the timeout), the answer's pace is the client's.
    IDLE     kept alive after an answer, no byte of the next request yet: closed past
             `idle_timeout_s`, unless its answer is still being written.

`expiry` is the pure decision. One timer per connection is armed lazily: a request's start and
end move no timer; a timer that fires re-reads the phase and re-arms for the real expiry.
Past `max_connections` open connections a new one is answered 503 and closed, lingering a
moment so that the client reads the answer rather than a reset. The first bytes of each
request's head pass through `chunked_over_length.prefer_chunked` (the one place a connection's
bytes are seen at a request's start).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace
from enum import StrEnum
from typing import cast

from aiohttp import web

from thawserver.chunked_over_length import (
    MAX_HEAD_BYTES,
    MAX_HELD_BODY_BYTES,
    settle,
)
from thawserver.connection_limits import ConnectionLimits

__all__ = ["CloseReason", "ConnectionGuard", "Phase", "expiry"]

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# A refused connection waits this long for the client to finish sending and close.
REFUSAL_LINGER_S = 1.0
# Past this many refused connections lingering at once, the next ones are closed at once.
MAX_LINGERING_REFUSALS = 256
# Connections closed by deadline in one event-loop iteration; the rest wait for the next, so
# that thousands of slow clients opened together and expiring together never stall the loop
# (and the requests of everyone else) for the time it takes to close them all.
CLOSES_PER_ITERATION = 64
# The most a connection's first bytes are held for chunked_over_length (a head and its body).
_MAX_HELD = MAX_HEAD_BYTES + MAX_HELD_BODY_BYTES


class Phase(StrEnum):
    """Where a connection is between requests (see the module docstring)."""

    HEAD = "head"
    REQUEST = "request"
    IDLE = "idle"


class CloseReason(StrEnum):
    """Why the guard closed or refused a connection (a metric label)."""

    HEAD_TIMEOUT = "head_timeout"
    IDLE_TIMEOUT = "idle_timeout"
    OVER_LIMIT = "over_connection_limit"


def expiry(phase: Phase, since: float, limits: ConnectionLimits) -> float | None:
    """When a connection that has been in `phase` since `since` (loop seconds) is closed;
    None: not while it stays in that phase."""
    if phase is Phase.HEAD and limits.head_timeout_s:
        return since + limits.head_timeout_s
    if phase is Phase.IDLE and limits.idle_timeout_s:
        return since + limits.idle_timeout_s
    return None


def _answer(status: int, phrase: str, message: str, *extra: str) -> bytes:
    body = json.dumps({"error": message}, separators=(",", ":")).encode()
    head = [
        f"HTTP/1.1 {status} {phrase}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *extra,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body


class ConnectionGuard:
    """The limits of one listener: wrap each of its connections (`protocol_factory`, `wrap`)
    and install `middleware` first in every application those connections serve.

    `open` counts the wrapped connections now open, `closed` the connections ended or refused
    by the guard, by reason."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.open = 0
        # Set when the server stops (start_draining): each answer closes its connection.
        self.draining = False
        self.closed: dict[CloseReason, int] = dict.fromkeys(CloseReason, 0)
        self._by_transport: dict[asyncio.BaseTransport, _Guarded] = {}
        self._lingering = 0
        self._closes_this_iteration = 0
        self._deferred: deque[_Guarded] = deque()  # expired, waiting for a later iteration
        secs = f"{limits.head_timeout_s:g} s"
        self._head_answer = _answer(408, "Request Timeout", f"request head not received in {secs}")
        self._full_answer = _answer(
            503,
            "Service Unavailable",
            f"the server holds {limits.max_connections} connections, its limit; retry later",
            "Retry-After: 1",
        )

    def full(self, *, pending: int = 0) -> bool:
        """Whether a new connection is over the cap, with `pending` more accepted but not
        wrapped yet (the activator's front door peeking at them)."""
        cap = self.limits.max_connections
        return bool(cap) and self.open + pending >= cap

    def start_draining(self, *, idle_timeout_s: float) -> None:
        """The server stops: from now on each answer closes its connection, and a kept-alive
        connection idle for `idle_timeout_s` (when shorter than the limit) is closed."""
        self.draining = True
        if self.limits.idle_timeout_s and self.limits.idle_timeout_s <= idle_timeout_s:
            return
        self.limits = replace(self.limits, idle_timeout_s=idle_timeout_s)
        for conn in list(self._by_transport.values()):
            conn.rearm()

    def protocol_factory(
        self, factory: Callable[[], asyncio.Protocol]
    ) -> Callable[[], asyncio.Protocol]:
        """For `loop.create_server`: each connection wrapped, or refused when over the cap."""

        def make() -> asyncio.Protocol:
            return self.refusal() if self.full() else self.wrap(factory())

        return make

    def wrap(self, protocol: asyncio.Protocol, *, since: float | None = None) -> asyncio.Protocol:
        """`protocol` under the deadlines; its first head is due `head_timeout_s` after
        `since` (the accept, loop time; None: when the transport is made). Never refused."""
        return _Guarded(self, protocol, since)

    def refusal(self) -> asyncio.Protocol:
        """A protocol that answers 503 (over the connection limit) and closes."""
        self.closed[CloseReason.OVER_LIMIT] += 1
        return _Refusal(self)

    @web.middleware
    async def middleware(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        """Marks the request's connection busy while its handler runs; while `draining`, its
        answer closes the connection."""
        transport = request.transport
        conn = self._by_transport.get(transport) if transport is not None else None
        if conn is None:  # a connection this guard does not know (tests' own servers)
            return await handler(request)
        conn.request_started()
        try:
            response = await handler(request)
        finally:
            conn.request_ended()
        if self.draining:
            response.force_close()  # the server stops: this client goes elsewhere after it
        return response

    # ---- bookkeeping of _Guarded and _Refusal ------------------------------------------

    def _may_close_now(self) -> bool:
        """Whether one more deadline close fits in this loop iteration (CLOSES_PER_ITERATION)."""
        if self._closes_this_iteration == 0:
            asyncio.get_running_loop().call_soon(self._next_iteration)
        self._closes_this_iteration += 1
        return self._closes_this_iteration <= CLOSES_PER_ITERATION

    def _next_iteration(self) -> None:
        self._closes_this_iteration = 0

    def _defer(self, conn: _Guarded) -> None:
        """Close `conn` in a later iteration (a queue, not a timer each: no heap churn)."""
        self._deferred.append(conn)
        if len(self._deferred) == 1:
            asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        self._closes_this_iteration = 0
        for _ in range(min(CLOSES_PER_ITERATION, len(self._deferred))):
            self._deferred.popleft()._expire()
        if self._deferred:
            asyncio.get_running_loop().call_soon(self._drain)

    def _opened(self, conn: _Guarded, transport: asyncio.BaseTransport) -> None:
        self.open += 1
        self._by_transport[transport] = conn

    def _lost(self, transport: asyncio.BaseTransport) -> None:
        if self._by_transport.pop(transport, None) is not None:
            self.open -= 1


class _Guarded(asyncio.Protocol):
    """One connection under the guard: forwards every callback to `inner` unchanged."""

    __slots__ = (
        "_bytes", "_guard", "_held", "_loop", "_paused", "_phase", "_since", "_timer",
        "_transport", "inner",
    )  # fmt: skip

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol, since: float | None):
        self._guard = guard
        self.inner = inner
        # Made by the loop's protocol factory. Kept: on Python 3.11 every get_running_loop()
        # is a getpid() system call, and a request would make two.
        self._loop = asyncio.get_running_loop()
        self._phase = Phase.HEAD
        self._since = since
        self._bytes = False  # bytes of the awaited head arrived
        self._held = bytearray()  # a request's first bytes, not yet passed on (_first_bytes)
        self._timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None
        self._paused = False

    # ---- the phases ----------------------------------------------------------------------

    def request_started(self) -> None:
        self._phase = Phase.REQUEST  # a pending timer finds no expiry and lapses

    def request_ended(self) -> None:
        self._phase = Phase.IDLE
        self._since = self._loop.time()
        self._bytes = False
        self._arm()

    def rearm(self) -> None:
        """The guard's limits changed: a waiting connection's deadline is due again."""
        if self._since is not None and self._phase is not Phase.REQUEST:
            self._arm()

    def _arm(self) -> None:
        """Make sure a timer fires no later than the current phase's expiry."""
        assert self._since is not None
        due = expiry(self._phase, self._since, self._guard.limits)
        if due is None:
            return
        if self._timer is not None:
            if self._timer.when() <= due:
                return  # fires first, then re-arms for `due`
            self._timer.cancel()
        self._timer = self._loop.call_at(due, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self._transport is None or self._transport.is_closing():
            return
        assert self._since is not None
        due = expiry(self._phase, self._since, self._guard.limits)
        if due is None:
            return
        loop = self._loop
        if loop.time() < due:
            self._timer = loop.call_at(due, self._expire)
            return
        if self._phase is Phase.IDLE and (
            self._paused or self._transport.get_write_buffer_size() > 0
        ):
            # The last answer is still on its way to a slow reader: not idle yet.
            self._since = loop.time()
            self._arm()
            return
        if not self._guard._may_close_now():
            self._guard._defer(self)
            return
        if self._phase is Phase.HEAD:
            self._guard.closed[CloseReason.HEAD_TIMEOUT] += 1
            if self._bytes:
                self._transport.write(self._guard._head_answer)
        else:
            self._guard.closed[CloseReason.IDLE_TIMEOUT] += 1
        self._transport.close()

    # ---- asyncio.Protocol, forwarded -----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # a stream socket's transport
        if self._since is None:
            self._since = self._loop.time()
        self._guard._opened(self, transport)
        self._arm()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._held:  # a request's first bytes, held until prefer_chunked can decide
            self._held += data
            # a head, and a chunked body, can only end on a line feed: decide then (or once
            # past anything that could be held)
            if b"\n" in data or len(self._held) > _MAX_HELD:
                held, self._held = bytes(self._held), bytearray()
                self._first_bytes(held)
            return
        if self._phase is Phase.IDLE:  # the next request's first bytes: its head is due
            self._phase = Phase.HEAD
            self._since = self._loop.time()
            self._arm()
        elif self._bytes or self._phase is Phase.REQUEST:
            self.inner.data_received(data)  # bytes within a request: passed on as they are
            return
        # The first bytes since the connection opened or its last request ended.
        self._bytes = True
        self._first_bytes(data)

    def _first_bytes(self, data: bytes) -> None:
        settled = settle(data)
        if settled is None:
            self._held = bytearray(data)  # head and body in separate reads: wait for the rest
            return
        self.inner.data_received(settled)

    def eof_received(self) -> bool | None:
        if self._held:  # the client is done sending: what it sent is the parser's
            held, self._held = bytes(self._held), bytearray()
            self.inner.data_received(held)
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self._paused = True
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self._paused = False
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._guard._lost(self._transport)
        self.inner.connection_lost(exc)


class _Refusal(asyncio.Protocol):
    """A connection over the cap: 503, then close once the client is done (or soon)."""

    def __init__(self, guard: ConnectionGuard) -> None:
        self._guard = guard
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._transport.write(self._guard._full_answer)
        if self._guard._lingering >= MAX_LINGERING_REFUSALS or not self._transport.can_write_eof():
            self._transport.close()
            return
        self._guard._lingering += 1
        # FIN after the answer; what the client still sends is read and dropped until it
        # closes too, so that its kernel never turns our close into a reset over the answer.
        self._transport.write_eof()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(REFUSAL_LINGER_S, self._transport.close)

    def data_received(self, data: bytes) -> None:
        pass  # the request of a refused connection is not read

    def eof_received(self) -> bool:
        return False  # close now

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._guard._lingering -= 1
