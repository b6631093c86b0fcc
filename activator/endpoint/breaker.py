"""Per-replica concurrency limit: at most `capacity` requests in flight on one replica.

The breaker never waits; waiting happens in the model's held queue, which is FIFO across all
replicas. `slot()` scopes a taken slot so it can never leak past the block. On a replica shared
by several models, each model's breaker also takes a slot of the replica's `SharedLimit`
(activator.endpoint.shared_limit): a slot is free only when both have room.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from activator.endpoint.shared_limit import SharedLimit
from activator.errors import ActivatorError

__all__ = ["Breaker"]


class Breaker:
    """Counts one model's in-flight requests on one replica against its capacity (0 =
    unlimited), and against the replica's `shared` limit when several models share it."""

    def __init__(self, capacity: int, shared: SharedLimit | None = None) -> None:
        if capacity < 0:
            raise ValueError(f"capacity = {capacity}, must be >= 0")
        self.capacity = capacity
        self.in_flight = 0
        self._shared = shared

    def has_capacity(self) -> bool:
        own = self.capacity == 0 or self.in_flight < self.capacity
        return own and (self._shared is None or self._shared.has_capacity())

    def try_take(self) -> bool:
        """Take a slot if one is free; the caller must `release()` it exactly once."""
        if not self.has_capacity():
            return False
        self.take_anyway()
        return True

    def take_anyway(self) -> None:
        """Take a slot even past capacity: a request bound to this replica (a live sequence,
        whose state lives here) cannot go to another one, and holding it back behind other
        models' traffic would only stall its sequence. The caller must `release()` it."""
        self.in_flight += 1
        if self._shared is not None:
            self._shared.take()

    def release(self) -> None:
        if self.in_flight <= 0:
            raise ActivatorError("breaker released more slots than were taken")
        self.in_flight -= 1
        if self._shared is not None:
            self._shared.release()  # last: it may hand the slot to another model at once

    @contextmanager
    def slot(self) -> Iterator[None]:
        """`with breaker.slot():` takes a slot for the block or raises if none is free."""
        if not self.try_take():
            raise ActivatorError(f"no free slot ({self.in_flight}/{self.capacity} in flight)")
        try:
            yield
        finally:
            self.release()
