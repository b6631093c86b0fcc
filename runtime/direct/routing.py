"""Requests on handed-off connections: this replica's models answered here, everything else
sent back to `thaw up`'s front door; their load, and their responses' state bytes.

A connection `thaw up` handed to this replica (runtime.direct.handoff) is served by the app like any
other; `DirectRouting.install` puts a middleware in front of every other one that recognizes
its requests by their transport. A request for a model this replica has loaded
(thawwire.paths.model_of: metadata, ready, config, infer) goes on to the app; anything else
(server paths, other models, statistics, the repository API) is forwarded to the front door
(runtime.direct.front_door). After `max_age_s` the next response carries `Connection: close`,
so the client reconnects through the activator and load rebalances after a scale-up; so does
the answer to a model-control call (a repository load or unload, Thaw's scale-to-zero): what
serves may have changed, this replica may be leaving, and the client's next request is routed
afresh (a load's replaced replica answering it would answer for the old files). Once `thaw up`
drains this replica (`drain`: scale-down, replacement), every next response closes its
connection: the clients go back through the activator at once, not at their max age.

The connection's state byte (runtime.direct.state) follows each response through public
hooks: `on_response_prepare` (headers about to be written: RESPONDING) and the middleware
itself, which writes the response whole (`prepare`, `write_eof`) before aiohttp would, so it
knows when the response has gone to the transport.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from runtime.direct.front_door import FrontDoor
from runtime.direct.load import DirectLoad
from runtime.direct.send_back import SEND_BACK
from runtime.direct.state import DirectConnection
from thawserver.connection_guard import ConnectionGuard
from thawwire.paths import changes_serving, model_of

if TYPE_CHECKING:
    from aiohttp.typedefs import Middleware

__all__ = ["DIRECT_ROUTING", "DirectRouting"]

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_PATHS_KEPT = 1024
_UNSEEN = "/"  # no model's name: model_of never returns it


class DirectRouting:
    """Routes the requests of handed-off connections (`track`ed by the handoff receiver)."""

    def __init__(
        self,
        *,
        is_loaded: Callable[[str], bool],
        front_door: FrontDoor,
        max_age_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._is_loaded = is_loaded
        self._front_door = front_door
        self._max_age_s = max_age_s
        self._draining = False
        self.clock = clock
        self.load = DirectLoad(clock())
        self._connections: dict[asyncio.BaseTransport, DirectConnection] = {}
        # Request path -> the model it names here (model_of), for the paths seen: a client
        # sends the same few paths again and again. Bounded: past _PATHS_KEPT, new paths
        # are parsed each time.
        self._models_of: dict[str, str | None] = {}
        # The ways back (runtime.direct.send_back), keeping the connection or closing it
        # (max age): made once, and never bound to a request (that would be a cycle).
        self._send_backs = (
            functools.partial(self._send_back, close=False),
            functools.partial(self._send_back, close=True),
        )

    def install(self, app: web.Application) -> None:
        """Route `app`'s requests on handed-off connections (call it before the app starts):
        the middleware goes in front of every other one but the connection guard's, which must
        see every request run, those sent to the front door too (else a request answered there
        slower than the head deadline is taken for a client that never sent its head: 408)."""
        first = app.middlewares[0] if app.middlewares else None
        guarded = isinstance(getattr(first, "__self__", None), ConnectionGuard)
        app.middlewares.insert(1 if guarded else 0, self._middleware())
        app.on_response_prepare.append(self._on_response_prepare)
        app[DIRECT_ROUTING] = self

    def drain(self) -> None:
        """`thaw up` drains this replica: from now on each handed-off connection's next
        response carries `Connection: close` (the clients reconnect through the activator)."""
        self._draining = True

    def track(self, direct: DirectConnection) -> None:
        """Requests on `direct`'s transport are routed from now on."""
        if direct.transport is not None:
            self._connections[direct.transport] = direct

    def forget(self, transport: asyncio.BaseTransport | None) -> None:
        """The connection on `transport` is no longer a handed-off one of this replica."""
        if transport is not None:
            self._connections.pop(transport, None)

    def _direct(self, request: web.BaseRequest) -> DirectConnection | None:
        if not self._connections:  # no handed-off connection: every request is a plain one
            return None
        transport = request.transport
        return self._connections.get(transport) if transport is not None else None

    def _middleware(self) -> Middleware:
        @web.middleware
        async def route_handed_off(request: web.Request, handler: _Handler) -> web.StreamResponse:
            direct = self._direct(request)
            if direct is None:
                return await handler(request)
            return await self._route(request, handler, direct)

        return route_handed_off

    async def _route(
        self, request: web.Request, handler: _Handler, direct: DirectConnection
    ) -> web.StreamResponse:
        direct.handling()
        clock, load = self.clock, self.load
        now = clock()
        close = self._draining or now >= direct.opened_at + self._max_age_s
        path = request.path
        model = self._models_of.get(path, _UNSEEN)
        if model == _UNSEEN:
            model = self._model_of(path)
        load.change(now, +1)
        try:
            if model is not None and self._is_loaded(model):
                # A request naming the client's shared memory goes back (runtime.direct.send_back).
                request[SEND_BACK] = self._send_backs[close]
                response = await handler(request)
            else:
                control = changes_serving(path)  # routed afresh after it
                response = await self._front_door.forward(request, close=close or control)
        finally:
            load.change(clock(), -1)
        if close and not response.prepared:
            response.force_close()  # max age: `Connection: close`, reconnect via the door
        # Written whole now (aiohttp's own finish then has nothing left to do): the connection
        # is idle again once the bytes are with the kernel.
        try:
            await response.prepare(request)
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away: aiohttp's own finish of the response ends the connection
        finally:
            if direct.open:
                direct.responded()
        return response

    def _model_of(self, path: str) -> str | None:
        model = model_of(path)
        if len(self._models_of) < _PATHS_KEPT:
            self._models_of[path] = model
        return model

    async def _send_back(
        self, request: web.Request, body: bytes, *, close: bool
    ) -> web.StreamResponse:
        return await self._front_door.forward(request, close=close, body=body)

    async def _on_response_prepare(
        self, request: web.Request, response: web.StreamResponse
    ) -> None:
        direct = self._direct(request)
        if direct is not None:
            direct.responding()  # headers about to be written


DIRECT_ROUTING: web.AppKey[DirectRouting] = web.AppKey("direct_routing", DirectRouting)
