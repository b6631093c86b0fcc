"""`thaw up`'s listening socket: accept, peek at the first request line, hand off or serve here.

A new client connection whose first request is for a warm model is passed to one of its
replicas (activator.direct.handoff) and the activator leaves its data path: the replica answers it
directly. Everything else (cold models, held requests, server paths, statistics, anything
unclear: timeouts, EOF, TLS, garbage) is served by the activator's own aiohttp server exactly
as before; such a connection kept alive moves to a replica at a later request boundary, once
this rule would hand it off (activator.direct.move_over, with `hands_off`). Peeking
(MSG_PEEK) consumes nothing, so either server reads the request from its first byte. `route`
is the pure decision; `FrontDoor` does the I/O, one task per connection.

The listener's ConnectionGuard (thawserver.connection_guard) holds from the accept on: past
its cap a new connection is answered 503 and closed before it is peeked at; the head deadline
of a connection served here counts from its accept (handed-off ones get the replica's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from aiohttp import web

from activator.config import ScaleSettings
from activator.direct.handoff import HandoffLink
from activator.direct.move_over import MoveOver
from activator.direct.orphans import Outcome
from activator.observe.metrics import Metrics
from thawserver.connection_guard import ConnectionGuard
from thawwire.paths import model_of, sent_back

__all__ = [
    "FrontDoor", "Reason", "RequestLine", "Route", "parse_request_line", "request_line", "route",
    "route_line",
]  # fmt: skip

logger = logging.getLogger(__name__)

PEEK_BYTES = 4096
# Peeks at an incomplete request line back off from 1 ms, doubling, to this: a client that
# sends its line in pieces costs a few peeks, not one per millisecond.
_MAX_PEEK_INTERVAL_S = 0.016
_REQUEST_LINE = re.compile(rb"([A-Z]{1,16}) (/[\x21-\x7e]*) HTTP/1\.([01])")
_HANDOFF_METHODS = frozenset({"GET", "HEAD", "POST"})


class Reason(StrEnum):
    """Why a connection went where it went (the `result` label of thaw_handoffs_total)."""

    HANDED_OFF = "handed_off"
    INCOMPLETE = "incomplete"  # not a decision: peek again
    TIMEOUT = "timeout"  # no complete request line in time
    EOF = "eof"
    NOT_HTTP = "not_http"  # TLS, garbage, absolute-form targets, escapes
    NOT_MODEL_PATH = "not_model_path"  # server paths, statistics, repository, metrics
    UNKNOWN_MODEL = "unknown_model"
    DISABLED = "disabled"  # thaw.direct_connections is false for the model
    LIMITED = "replica_limit"  # thaw.container_concurrency is set: the activator enforces it
    HELD = "held_requests"  # requests wait for it: keep the order, serve here
    NO_REPLICA = "no_direct_replica"  # cold, waking, or no replica's socket is connected
    SEND_FAILED = "send_failed"
    SENT_BACK = (
        "sent_back"  # a replica sent the request back (runtime.direct.send_back): serve here
    )


@dataclass(frozen=True)
class RequestLine:
    method: str
    path: str  # without the query
    sent_back: bool = False  # the query marks a request a replica sent back


@dataclass(frozen=True)
class Route:
    """Decision for one connection: hand it off for `model`, or serve it here (`reason`)."""

    reason: Reason
    model: str = ""


@dataclass(frozen=True)
class DirectView:
    """What the decision needs of a model's endpoint."""

    enabled: bool
    held: int
    limited: bool = False  # a per-replica limit (container_concurrency) needs every request


def parse_request_line(data: bytes) -> RequestLine | Reason:
    """The first request line of `data` (peeked bytes); INCOMPLETE without its CRLF yet."""
    newline = data.find(b"\n")
    if newline < 0:
        return Reason.NOT_HTTP if len(data) >= PEEK_BYTES else Reason.INCOMPLETE
    end = newline - 1
    if end < 0 or data[end] != 0x0D:  # a bare LF: lenient parsers differ, so not ours to route
        return Reason.NOT_HTTP
    match = _REQUEST_LINE.fullmatch(data[:end])
    if match is None:
        return Reason.NOT_HTTP
    return request_line(match.group(1).decode("ascii"), match.group(2).decode("ascii"))


def request_line(method: str, target: str) -> RequestLine | Reason:
    """The request line of `method` and `target` (its path and query, as sent); NOT_HTTP for a
    target the servers would decode or normalize (theirs to answer)."""
    path = target.split("?", 1)[0]
    if "%" in path or "#" in target or "//" in path or "\\" in path:
        return Reason.NOT_HTTP
    return RequestLine(method, path, "?" in target and sent_back(target))


def route(data: bytes, *, view: Callable[[str], DirectView | None], final: bool = False) -> Route:
    """Where the connection whose first bytes are `data` goes.

    `view(model)` describes the model's endpoint (None: no such model); `final` says no more
    bytes will be waited for (an incomplete line is then a timeout).
    """
    line = parse_request_line(data)
    if line is Reason.INCOMPLETE:
        return Route(Reason.TIMEOUT if final else Reason.INCOMPLETE)
    if isinstance(line, Reason):
        return Route(line)
    return route_line(line, view=view)


def route_line(line: RequestLine, *, view: Callable[[str], DirectView | None]) -> Route:
    """Where a connection whose (next) request is `line` goes (`route`, past the parsing)."""
    if line.sent_back:
        return Route(Reason.SENT_BACK)
    model = model_of(line.path)
    if model is None or line.method not in _HANDOFF_METHODS:
        return Route(Reason.NOT_MODEL_PATH)
    endpoint = view(model)
    if endpoint is None:
        return Route(Reason.UNKNOWN_MODEL, model)
    if not endpoint.enabled:
        return Route(Reason.DISABLED, model)
    if endpoint.limited:
        return Route(Reason.LIMITED, model)
    if endpoint.held:
        return Route(Reason.HELD, model)
    return Route(Reason.HANDED_OFF, model)


class DirectEndpoint(Protocol):
    """The part of ModelEndpoint the front door uses."""

    @property
    def settings(self) -> ScaleSettings: ...

    @property
    def held_count(self) -> int: ...

    def direct_link(self) -> HandoffLink | None: ...


class FrontDoor:
    """Accepts on `listener`; hands connections to replicas or to the activator's `server`."""

    def __init__(
        self,
        listener: socket.socket,
        server: web.Server,
        endpoints: Mapping[str, DirectEndpoint],
        metrics: Metrics,
        *,
        guard: ConnectionGuard,
        first_byte_timeout_s: float = 1.0,
        line_wait_s: float = 0.05,
        handoff: bool = True,
        moves: MoveOver | None = None,
    ) -> None:
        self._listener = listener
        self._server = server
        self._guard = guard
        self._endpoints = endpoints
        self._metrics = metrics
        self._first_byte_timeout_s = first_byte_timeout_s
        self._line_wait_s = line_wait_s
        # Off under `--http-restricted-api`: a handed-off connection's later requests would
        # reach the replica without the activator's header check.
        self._handoff = handoff
        # Connections served here move to a replica once one would take them (move_over).
        self._moves = moves
        if moves is not None and handoff:
            moves.attach(self.hands_off, metrics.direct_moves)
        self._accepting: asyncio.Task[None] | None = None
        self._routing: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._listener.setblocking(False)
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop())

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self._listener)
            except OSError as exc:  # out of fds, aborted handshake: keep accepting
                logger.warning("accept failed: %s", exc)
                await asyncio.sleep(0.05)
                continue
            conn.setblocking(False)
            accepted_at = loop.time()
            if self._guard.full(pending=len(self._routing)):
                task = loop.create_task(self._refuse(conn))
            else:
                task = loop.create_task(self._route(conn, accepted_at))
            self._routing.add(task)
            task.add_done_callback(self._routing.discard)

    async def _refuse(self, conn: socket.socket) -> None:
        """Over the connection cap: 503 and close, without peeking."""
        try:
            await asyncio.get_running_loop().connect_accepted_socket(self._guard.refusal, sock=conn)
        except OSError as exc:
            conn.close()
            logger.debug("refused connection dropped: %s", exc)

    async def _route(self, conn: socket.socket, accepted_at: float) -> None:
        try:
            decision = await self._decide(conn)
            if decision.reason is Reason.HANDED_OFF:
                link = self._endpoints[decision.model].direct_link()
                if link is None:
                    decision = Route(Reason.NO_REPLICA, decision.model)
                elif link.send(conn, self):
                    self._count(decision)
                    return  # the link owns it now
                else:
                    decision = Route(Reason.SEND_FAILED, decision.model)
            self._count(decision)
        except OSError as exc:  # reset while being peeked at
            conn.close()
            logger.debug("connection dropped before it was routed: %s", exc)
            return
        except BaseException:
            conn.close()
            raise
        await self._serve_here(conn, accepted_at)

    async def _serve_here(self, conn: socket.socket, accepted_at: float | None = None) -> None:
        """The activator's own server takes the connection from its first byte, under the
        guard's deadlines (its head due `head_timeout_s` after `accepted_at`)."""
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: self._guard.wrap(self._served_here(), since=accepted_at), sock=conn
            )
        except BaseException as exc:
            conn.close()
            if not isinstance(exc, OSError):
                raise
            logger.debug("connection dropped before it was served: %s", exc)

    def _served_here(self) -> asyncio.Protocol:
        protocol = self._server()
        return protocol if self._moves is None else self._moves.wrap(protocol)

    def hands_off(self, method: str, target: str) -> str | None:
        """The model a new connection whose first request is `method` `target` (path and
        query, as sent) would be handed to a replica of now; None: it would be served here."""
        line = request_line(method, target)
        if isinstance(line, Reason):
            return None
        decision = route_line(line, view=self._view)
        if decision.reason is not Reason.HANDED_OFF:
            return None
        return decision.model if self._endpoints[decision.model].direct_link() else None

    # ---- activator.direct.handoff.Fallback: connections a replica did not end itself -------------

    def take_back(self, conn: socket.socket) -> None:
        """A handed-off connection the replica did not take, or left idle when it died: the
        activator's own server serves it from its next request on."""
        task = asyncio.get_running_loop().create_task(self._serve_here(conn))
        self._routing.add(task)
        task.add_done_callback(self._routing.discard)

    def count(self, model: str, outcome: Outcome) -> None:
        self._metrics.direct_fallbacks.labels(model, outcome.value).inc()

    async def _decide(self, conn: socket.socket) -> Route:
        if not await self._readable(conn):
            return Route(Reason.TIMEOUT)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._line_wait_s
        interval = 0.001
        while True:
            try:
                data = conn.recv(PEEK_BYTES, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                data = None
            if data == b"":
                return Route(Reason.EOF)
            final = loop.time() >= deadline
            decision = route(data or b"", view=self._view, final=final)
            if decision.reason is not Reason.INCOMPLETE:
                return decision
            await asyncio.sleep(min(interval, max(0.0, deadline - loop.time())))
            interval = min(2 * interval, _MAX_PEEK_INTERVAL_S)

    def _view(self, model: str) -> DirectView | None:
        endpoint = self._endpoints.get(model)
        if endpoint is None:
            return None
        settings = endpoint.settings
        return DirectView(
            enabled=settings.direct_connections and self._handoff,
            held=endpoint.held_count,
            limited=settings.container_concurrency > 0,
        )

    async def _readable(self, conn: socket.socket) -> bool:
        """Wait up to first_byte_timeout_s for bytes (or EOF) without reading them."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(conn.fileno(), wake)
        try:
            await asyncio.wait_for(ready, self._first_byte_timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            loop.remove_reader(conn.fileno())

    def _count(self, decision: Route) -> None:
        # Only repository models become label values: clients choose the other names.
        model = decision.model if decision.model in self._endpoints else ""
        self._metrics.handoffs.labels(model, decision.reason.value).inc()

    async def close(self) -> None:
        """Stop accepting; connections still being peeked at are closed."""
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
        self._listener.close()
        for task in list(self._routing):
            task.cancel()
        await asyncio.gather(*self._routing, return_exceptions=True)
