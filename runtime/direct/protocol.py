"""The asyncio protocol of one handed-off connection: aiohttp's own handler, wrapped.

The replica's `web.Server` makes the handler, as for any connection it accepts (so graceful
shutdown drains it like the others); this wrapper is what the event loop talks to. It forwards
every protocol callback to the handler unchanged, and tells the connection's state
(runtime.direct.state) what aiohttp's public interfaces cannot: request bytes arriving, before
the parser consumes them, and the connection's end, after aiohttp has handled it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

from runtime.direct.state import DirectConnection

__all__ = ["DirectProtocol"]


class DirectProtocol(asyncio.Protocol):
    """`handler` (aiohttp's) serving `direct`; `on_open(direct)` runs once the transport is
    known, before the handler sees it, `on_lost(self)` once the handler has seen the end."""

    def __init__(
        self,
        handler: asyncio.Protocol,
        direct: DirectConnection,
        *,
        on_open: Callable[[DirectConnection], None],
        on_lost: Callable[[DirectProtocol], None],
    ) -> None:
        self.handler = handler
        self.direct = direct
        self.transport: asyncio.Transport | None = None
        self._on_open = on_open
        self._on_lost = on_lost
        direct.handler = handler

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP socket's transport
        self.direct.transport = self.transport
        self.direct.loop = asyncio.get_running_loop()  # once: on 3.11 each call is a getpid()
        self._on_open(self.direct)
        self.handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.direct.open:
            self.direct.bytes_in()  # before the parser consumes them
        self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received()

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.handler.connection_lost(exc)
        self.direct.transport = None
        self._on_lost(self)
