"""The state byte of each handed-off connection, kept in a file `thaw up` maps too.

`thaw up` keeps its own copy of every client connection it hands to this replica
(runtime.direct.handoff); if the replica dies, that byte (thawwire.handoff_protocol.SlotState) tells
it what the client is owed: `IDLE`, its next request is served by `thaw up`; `STARTED`
(consumed, unanswered), a 502; `RESPONDING`, an aborted connection.

Writes are plain stores into a shared mapping: no syscall per request. aiohttp handles one
request at a time per connection, so the next request's STARTED comes after the previous
response's RESPONDING; bytes that arrive while a response is going out (a pipelining client)
are settled once it is out.
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import socket
from dataclasses import dataclass, field
from pathlib import Path

from thawserver.aiohttp_compat import has_queued_requests
from thawwire.handoff_protocol import SLOTS, SlotState

__all__ = ["ConnectionStates", "DirectConnection"]


class ConnectionStates:
    """The state bytes, one per slot, in the file `thaw up` created and maps too (`path`);
    without one, private memory of SLOTS bytes (nothing to share)."""

    def __init__(self, path: Path | None) -> None:
        if path is None:
            self.bytes = mmap.mmap(-1, SLOTS)
        else:
            with open(path, "r+b") as file:  # the mapping outlives the file object
                self.bytes = mmap.mmap(file.fileno(), 0)
        self.size = len(self.bytes)  # DirectConnection stores into `bytes` directly

    def get(self, slot: int) -> SlotState:
        return SlotState(self.bytes[slot])

    def close(self) -> None:
        self.bytes.close()


@dataclass(slots=True, eq=False)
class DirectConnection:
    """This replica's side of one handed-off connection, and its state byte's transitions."""

    slot: int
    keep: socket.socket  # our own descriptor: shut down when the connection ends here
    opened_at: float
    states: ConnectionStates
    handler: asyncio.BaseProtocol | None = field(default=None, repr=False)  # aiohttp's
    transport: asyncio.WriteTransport | None = field(default=None, repr=False)  # while open
    loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)  # its transport's
    open: bool = True  # False once ended here: the slot may be handed out again at once
    busy: bool = False  # a request is in the handler, its response not yet written
    writing: bool = False  # a response is being written
    pending: bool = False  # bytes arrived while a response was written or flushed

    def bytes_in(self) -> None:
        """Request bytes arrived (before the parser takes them): consumed from here on. While
        a response is still going out it stays RESPONDING (a 502 must not follow a cut-off
        response) and the response's end decides."""
        if self.states.bytes[self.slot] == SlotState.RESPONDING:
            self.pending = True
        else:
            self.states.bytes[self.slot] = SlotState.STARTED

    def handling(self) -> None:
        """A request entered the handler (the bytes that came in were its own)."""
        self.busy, self.pending = True, False

    def responding(self) -> None:
        """A response's headers are about to be written."""
        if self.open:
            self.writing = True
            self.states.bytes[self.slot] = SlotState.RESPONDING

    def responded(self) -> None:
        """The response was handed to the transport; idle once it is out (`_when_flushed`)."""
        self.busy = self.writing = False
        self._when_flushed(0.0)

    def _when_flushed(self, wait_s: float) -> None:
        """Once every byte of the response is with the kernel (it reaches the client even if
        this process dies), the connection is idle again, unless a next request has begun."""
        transport, loop = self.transport, self.loop
        if not self.open or self.writing or transport is None or loop is None:
            return  # another response is being written, or the connection is gone
        if transport.get_write_buffer_size() > 0:  # a large response, a slow client
            wait_s = min(0.05, max(0.002, 2 * wait_s))
            loop.call_later(wait_s, self._when_flushed, wait_s)
            return
        # A pipelining client's next request may already be parsed (aiohttp's private queue,
        # through the compat module); without it, `pending` (bytes that arrived meanwhile)
        # still tells.
        queued = self.handler is not None and has_queued_requests(self.handler)
        begun = self.busy or self.pending or queued
        self.states.bytes[self.slot] = SlotState.STARTED if begun else SlotState.IDLE
        self.pending = False

    @property
    def unanswered(self) -> bool:
        """A request was consumed and nothing of its answer written."""
        return self.states.get(self.slot) is SlotState.STARTED

    def end(self, *, shut_down: bool) -> None:
        """Stop tracking; with `shut_down` the client sees FIN now, although `thaw up`'s copy
        keeps the socket open until it is told."""
        self.open = False
        if shut_down:
            with contextlib.suppress(OSError):
                self.keep.shutdown(socket.SHUT_RDWR)
        self.keep.close()
