"""The server's end of a stub process's channel, driven by the event loop (no thread).

    loop.add_reader(socket) ─▶ receive every waiting message ─▶ on_message(message)   (loop)
    send(message) ─▶ small: gathered until the end of this turn of the loop ─┐
                  └▶ with memfds: after what was gathered ─▶ non-blocking sendmsg ─┬▶ sent
                                             buffer full: queued, flushed by add_writer ◀┘

What is sent in one turn of the loop (the requests that arrived together) goes as one bundle
(runtime.python.stub.wire): one send, one wake-up of the stub.

Reading on the loop saves the two thread hand-offs a reader thread costs per message (a woken
thread waits for the GIL while the loop is busy, for up to its switch interval, 5 ms), which
for a tiny model were most of a request's time. Sends never block the loop: a message that
does not fit in the socket's buffer waits, in order, until the stub has read enough. Use every
method on the loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections import deque
from collections.abc import Callable

from runtime.python.stub.wire import (
    MESSAGE_MAX_BYTES,
    ChannelClosed,
    ChannelReset,
    Encoded,
    Message,
    bundle,
    bundleable,
    decode_all,
    encode,
    receive,
    transmit,
)

__all__ = ["LoopChannel"]

logger = logging.getLogger(__name__)

# Messages read per wake-up before giving the loop back to other work (a stub streaming many
# decoupled responses must not starve the HTTP side).
_READ_BURST = 64


class LoopChannel:
    """One stub's channel on the event loop: messages go to `on_message`; when the stub is gone
    (end of stream, reset, or a message that cannot be parsed) `on_closed` runs once."""

    def __init__(
        self,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        *,
        on_message: Callable[[Message], None],
        on_closed: Callable[[], None],
    ) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._fd = sock.fileno()
        self._loop = loop
        self._on_message = on_message
        self._on_closed = on_closed
        self._backlog: deque[Encoded] = deque()  # in order, waiting for room in the buffer
        self._gathered: list[Encoded] = []  # small messages of this turn, sent at its end
        self._gathered_bytes = 0
        self._buffer = bytearray(MESSAGE_MAX_BYTES)  # every read goes through it
        self.closed = False
        self._draining = False  # reading what a gone stub left, before on_closed
        loop.add_reader(self._fd, self._readable)

    def send(self, message: Message) -> None:
        """Send (or queue) one message; ChannelClosed if the stub is gone."""
        self.send_encoded(encode(message))

    def send_encoded(self, encoded: Encoded) -> None:
        """Send one message already encoded (e.g. off the loop, for large tensors); owns it."""
        if self.closed:
            encoded.close()
            raise ChannelClosed("the stub's channel is closed")
        if bundleable(encoded):
            if self._gathered_bytes + len(encoded.payload) > MESSAGE_MAX_BYTES - 64:
                self._flush_gathered()
            if not self._gathered:
                self._loop.call_soon(self._end_of_turn)
            self._gathered.append(encoded)
            self._gathered_bytes += len(encoded.payload) + 4
            return
        self._flush_gathered()
        self._transmit(encoded)

    def _end_of_turn(self) -> None:
        if not self.closed:
            with contextlib.suppress(ChannelClosed):  # on_closed has run: senders learn it
                self._flush_gathered()

    def _flush_gathered(self) -> None:
        gathered, self._gathered, self._gathered_bytes = self._gathered, [], 0
        if gathered:
            self._transmit(bundle(gathered))

    def _transmit(self, encoded: Encoded) -> None:
        if self._backlog:
            self._backlog.append(encoded)
            return
        try:
            transmit(self._sock, encoded)
        except BlockingIOError:
            self._backlog.append(encoded)
            self._loop.add_writer(self._fd, self._writable)
            return
        except ChannelClosed:
            encoded.close()
            self._gone()
            raise
        encoded.close()

    def splice(self, sock: socket.socket) -> socket.socket:
        """Go on over `sock` instead (the native front's relay of this stub's socket, which
        carries what the stub sent and was not yet read): what is queued goes there, in order.
        Returns the former socket, for the caller to hand over and close."""
        old = self._sock
        self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        sock.setblocking(False)
        self._sock, self._fd = sock, sock.fileno()
        self._loop.add_reader(self._fd, self._readable)
        if self._backlog:
            self._loop.add_writer(self._fd, self._writable)
        return old

    def close(self) -> None:
        """Stop reading and close the socket (`on_closed` is not called)."""
        if self.closed:
            return
        self.closed = True
        self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        while self._backlog:
            self._backlog.popleft().close()
        self._gathered.clear()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    def _close(self) -> None:
        if not self.closed:
            self.close()
            self._on_closed()

    def _gone(self) -> None:
        """The stub is gone: a send found it so, or a read met its reset. What it wrote before
        it went is still in the socket (a `done` for an execute it finished, say): deliver that
        first, or the execute it answered would fail as if it had died running it."""
        if self.closed or self._draining:
            return
        self._draining = True
        self._readable(until_empty=True)
        self._close()

    def _writable(self) -> None:
        while self._backlog:
            encoded = self._backlog[0]
            try:
                transmit(self._sock, encoded)
            except BlockingIOError:
                return  # still full: called again when there is room
            except ChannelClosed:
                self._gone()
                return
            self._backlog.popleft().close()
        self._loop.remove_writer(self._fd)

    def _readable(self, until_empty: bool = False) -> None:
        while self._read_burst() and until_empty:
            pass

    def _read_burst(self) -> bool:
        """Read and deliver up to a burst of messages; True when there may be more to read."""
        for _ in range(_READ_BURST):
            if self.closed:
                return False
            try:
                payload, fds = receive(self._sock, self._buffer)
            except (BlockingIOError, InterruptedError):
                return False
            except ChannelReset:
                # The stub died with messages of ours unread (requests queued behind the one
                # that killed it). What it wrote before it went is still to be read: an answer
                # to an execute it finished must not be lost with it.
                self._gone()
                return False
            except ChannelClosed:
                self._close()
                return False
            try:
                messages = decode_all(payload, fds)
            except (ValueError, KeyError, TypeError, struct.error) as exc:
                logger.error("a stub sent a malformed message: %r", exc)
                self._close()
                return False
            for message in messages:
                self._on_message(message)
        return True
