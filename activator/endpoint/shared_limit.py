"""One shared replica's concurrency limit: the in-flight requests of every model on it count.

A replica shared by several models (`thaw.placement` shared) has one limit for all of them
(`--shared-replica-concurrency`); each model's `Breaker` on it also takes a slot here. When a
slot frees, every model waiting for one is told (its held requests may now go), since the
request that finished may have been another model's.

    SharedLimits.for_host(id) ──▶ SharedLimit (one per shared replica, while any replica of
                                  a model on it lives: weakly held)
    SharedLimit.release()     ──▶ each listener (a model's dispatch of its held requests)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from activator.errors import ActivatorError

__all__ = ["SharedLimit", "SharedLimits"]


class SharedLimit:
    """In-flight requests of every model on one shared replica, against `capacity` (0 =
    unlimited); `release` tells `listeners` that a slot freed."""

    def __init__(self, capacity: int, listeners: list[Callable[[], None]]) -> None:
        if capacity < 0:
            raise ValueError(f"capacity = {capacity}, must be >= 0")
        self.capacity = capacity
        self.in_flight = 0
        self._listeners = listeners  # the registry's list: models added later are told too

    def has_capacity(self) -> bool:
        return self.capacity == 0 or self.in_flight < self.capacity

    def take(self) -> None:
        self.in_flight += 1

    def release(self) -> None:
        if self.in_flight <= 0:
            raise ActivatorError("shared limit released more slots than were taken")
        self.in_flight -= 1
        if self.capacity:
            for listener in list(self._listeners):
                listener()


class SharedLimits:
    """The limits of every shared replica of one `thaw up`, by replica id, and the models
    to tell when a slot frees."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity = {capacity}, must be >= 0")
        self.capacity = capacity
        self._listeners: list[Callable[[], None]] = []
        self._limits: weakref.WeakValueDictionary[str, SharedLimit] = weakref.WeakValueDictionary()

    def for_host(self, host: str) -> SharedLimit:
        """The limit of shared replica `host` (made on first use; gone with its last user)."""
        limit = self._limits.get(host)
        if limit is None:
            limit = self._limits[host] = SharedLimit(self.capacity, self._listeners)
        return limit

    def listen(self, listener: Callable[[], None]) -> None:
        """Call `listener()` whenever a slot of any shared replica frees."""
        self._listeners.append(listener)
