"""Bounded FIFO of requests held while a model has no free replica slot.

Bounded by count and by the sum of declared body sizes; each entry has a deadline. The first
request of an empty queue is always held, whatever its size: the body cap (`--max-body-bytes`,
or `--max-internal-body-bytes` for a BLS call) bounds one request, and the byte bound is of the
requests held together (a 1 GiB BLS call to a model at zero waits for its wake; a second one
beside it is refused). The queue
holds the waiter's future; the model endpoint resolves it with a replica (FIFO) or an error.
Pure bookkeeping: times are passed in, nothing here sleeps.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from activator.errors import Overloaded

__all__ = ["HeldQueue", "HeldRequest"]

T = TypeVar("T")


@dataclass(eq=False)
class HeldRequest(Generic[T]):
    """One waiting request: its declared size in bytes, deadline and the future it waits on."""

    size: int
    deadline: float
    enqueued_at: float
    future: asyncio.Future[T] = field(repr=False)


class HeldQueue(Generic[T]):
    """FIFO of HeldRequests with count and byte limits."""

    def __init__(self, *, max_count: int, max_bytes: int, model: str = "") -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.model = model
        self._items: deque[HeldRequest[T]] = deque()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def push(self, item: HeldRequest[T]) -> None:
        """Hold `item` at the back, or raise Overloaded (503 + Retry-After) when full."""
        if len(self._items) >= self.max_count:
            raise Overloaded(
                f"model '{self.model}' is busy: {len(self._items)} requests already held "
                f"(max_held_requests = {self.max_count})"
            )
        if self._items and self.bytes + item.size > self.max_bytes:
            raise Overloaded(
                f"model '{self.model}' is busy: held bodies would total "
                f"{self.bytes + item.size} bytes (max_held_bytes = {self.max_bytes})"
            )
        self._items.append(item)
        self.bytes += item.size

    def remove(self, item: HeldRequest[T]) -> bool:
        """Drop `item` (client gone, deadline passed); False if it was not held."""
        try:
            self._items.remove(item)
        except ValueError:
            return False
        self.bytes -= item.size
        return True

    def pop(self) -> HeldRequest[T] | None:
        """The oldest request still waiting, removed from the queue; None when empty."""
        while self._items:
            item = self._items.popleft()
            self.bytes -= item.size
            if not item.future.done():
                return item
        return None

    def oldest(self) -> HeldRequest[T] | None:
        """The request at the front (the next to be released), left in place; None when empty."""
        return self._items[0] if self._items else None

    def expired(self, now: float) -> list[HeldRequest[T]]:
        """Remove and return every request whose deadline has passed."""
        late = [item for item in self._items if item.deadline <= now]
        for item in late:
            self.remove(item)
        return late

    def drain(self) -> list[HeldRequest[T]]:
        """Remove and return everything held (to fail them all)."""
        items = list(self._items)
        self._items.clear()
        self.bytes = 0
        return items
