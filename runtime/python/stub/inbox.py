"""A stub process's incoming messages, read by whichever thread is waiting for one.

    main thread:  get(WORK) ──┐   one waiter at a time reads the channel (the reader); each
    BLS caller:   get(bls 7) ─┼─▶ message goes to its box (work, or the call it answers), and
    metric call:  get(call 3) ┘   the reader goes on reading until its own box has one

There is no reader thread: in the common case (the main thread waiting for the next execute)
the message is read by the thread that runs it, with no hand-off between threads, and for a
tiny model each such hand-off (a wake-up and a GIL switch) cost more than the model. When the
reader's own message comes it stops reading and wakes the others, one of which reads next, so
a thread blocked in `get` always has someone reading for it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable

from runtime.python.stub.wire import Channel, ChannelClosed, Message

__all__ = ["WORK", "Inbox", "box_of"]

WORK = "work"  # init, execute, finalize: the main thread's box


def box_of(message: Message) -> Hashable:
    """The box a message belongs in: the call it answers, else the main thread's work."""
    op = message.fields.get("op")
    if op == "bls_response":
        return ("bls", int(message.fields["bls"]))
    if op == "reply":
        return ("call", int(message.fields["call"]))
    return WORK


class Inbox:
    """Boxes of messages by who waits for them; `get` blocks, reading for everyone."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        self._cond = threading.Condition()  # guards every field below
        self._boxes: dict[Hashable, deque[Message]] = {WORK: deque()}
        self._reading = False  # a waiter is reading the channel (without the lock)
        self._closed = False

    def open(self, key: Hashable) -> None:
        """Keep messages for `key` from now on (before sending what they answer)."""
        with self._cond:
            self._boxes[key] = deque()

    def discard(self, key: Hashable) -> None:
        """Stop keeping messages for `key` (late ones are dropped)."""
        with self._cond:
            self._boxes.pop(key, None)

    def ready(self, key: Hashable) -> bool:
        """Whether a message for `key` is already here (`get` would not wait)."""
        with self._cond:
            return bool(self._boxes.get(key))

    def get(self, key: Hashable) -> Message | None:
        """The next message for `key` (opened), or None once the server is gone."""
        with self._cond:
            while True:
                box = self._boxes[key]
                if box:
                    return box.popleft()
                if self._closed:
                    return None
                if self._reading:
                    self._cond.wait()
                    continue
                self._reading = True
                self._cond.release()
                messages: list[Message] = []
                try:
                    messages = self._channel.recv_all()
                except ChannelClosed:
                    pass
                finally:  # a malformed message raises on: the stream is over for everyone
                    self._cond.acquire()
                    self._reading = False
                    if not messages:
                        self._closed = True
                    for message in messages:
                        self._route(message)
                    self._cond.notify_all()

    def _route(self, message: Message) -> None:
        box = self._boxes.get(box_of(message))
        if box is not None:
            box.append(message)
