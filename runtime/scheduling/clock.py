"""The scheduler's time: a nanosecond reading and one-shot timers, injected so tests can step it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "LoopClock", "Timer"]


class Timer(Protocol):
    """A pending `Clock.call_at`; `cancel` is a no-op once it has fired."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Monotonic time in nanoseconds, and callbacks at a time on that scale (on the event loop)."""

    def now_ns(self) -> int: ...

    def call_at(self, deadline_ns: int, callback: Callable[[], None]) -> Timer: ...


class LoopClock:
    """`time.perf_counter_ns` (the timebase of the statistics), timers on the running loop."""

    # The function itself, not a method that calls it: this is read once per request.
    now_ns = staticmethod(time.perf_counter_ns)

    def call_at(self, deadline_ns: int, callback: Callable[[], None]) -> Timer:
        """Run `callback` on the running event loop once `now_ns()` reaches `deadline_ns`."""
        delay_s = max(0, deadline_ns - time.perf_counter_ns()) / 1e9
        return asyncio.get_running_loop().call_later(delay_s, callback)
