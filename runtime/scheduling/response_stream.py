"""A decoupled request's responses: sent from model threads, read as an async iterator on the loop.

    model thread ── sender.send ─▶ ResponseStream.send (call_soon_threadsafe) ─▶ queue
    event loop  ◀── `async for item, final in stream` ◀──────────────────────────┘

The stream ends after the item sent with `final`. `close()` (the reader went away) makes
`cancelled()` True, so a model polling `is_cancelled()` can stop, and drops later sends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from runtime.inference import InferResponse

__all__ = ["ResponseStream", "StreamItem"]

StreamItem = tuple[InferResponse | Exception | None, bool]


class ResponseStream:
    """One request's stream of responses; create it on the event loop that reads it."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[StreamItem] = asyncio.Queue()
        self._closed = False
        self._ended = False

    def send(self, item: InferResponse | Exception | None, *, final: bool) -> None:
        """Queue one item (any thread); nothing after the final one, or after `close`."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._put, (item, final))

    def cancelled(self) -> bool:
        return self._closed

    def close(self) -> None:
        """The reader is done: later sends are dropped, the model sees it cancelled."""
        self._closed = True

    def _put(self, entry: StreamItem) -> None:
        if self._ended or self._closed:
            return
        if entry[1]:
            self._ended = True
        self._queue.put_nowait(entry)

    async def items(self) -> AsyncIterator[StreamItem]:
        """Every (item, final) pair in order, until the final one."""
        while True:
            entry = await self._queue.get()
            yield entry
            if entry[1]:
                return
