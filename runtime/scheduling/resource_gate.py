"""Triton's execution_count rate limiter, at execution: an instance runs a batch only while it
holds every resource its `rate_limiter` names, and gives them back when the batch is done.

    gate = ResourceGate(limits)                     limits: rate_limit.ResourceLimits' map
    run = gate.holding({(0, "R1"): 8}, run)         a worker thread's execute, gated
    run = gate.holding_async({(0, "R1"): 8}, run)   a loop instance's execute, gated

A resource's count is the resource map's (`--rate-limit-resource`, else the largest need of any
loaded instance); a need is taken whole or not at all, so two instances never hold part of what
each needs while waiting for the rest (no deadlock). An instance whose need is not in the map yet
(its load has not finished) counts its own need as the limit. Waiters are served in arrival
order as resources come back; `priority` orders nothing here.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import ParamSpec, TypeVar

from runtime.scheduling.rate_limit import ResourceKey, ResourceLimits

__all__ = ["Needs", "ResourceGate"]

Needs = Mapping[ResourceKey, int]
P = ParamSpec("P")
T = TypeVar("T")


class ResourceGate:
    """The resources in use by running executions, server-wide; any thread, and the loop."""

    def __init__(self, limits: ResourceLimits) -> None:
        self._limits = limits
        self._lock = threading.Condition()
        self._in_use: dict[ResourceKey, int] = {}
        # Loop waiters, oldest first: their need, and the future their grant resolves.
        self._waiters: deque[tuple[Needs, asyncio.Future[None], asyncio.AbstractEventLoop]] = (
            deque()
        )

    def holding(self, needs: Needs, run: Callable[P, T]) -> Callable[P, T]:
        """`run` (blocking, in a worker thread) executed while holding `needs`."""

        def gated(*args: P.args, **kwargs: P.kwargs) -> T:
            self._acquire_blocking(needs)
            try:
                return run(*args, **kwargs)
            finally:
                self.release(needs)

        return gated

    def holding_async(
        self, needs: Needs, run: Callable[P, Awaitable[T]]
    ) -> Callable[P, Awaitable[T]]:
        """`run` (awaited on the loop) executed while holding `needs`."""

        async def gated(*args: P.args, **kwargs: P.kwargs) -> T:
            await self._acquire(needs)
            try:
                return await run(*args, **kwargs)
            finally:
                self.release(needs)

        return gated

    def release(self, needs: Needs) -> None:
        """Give `needs` back; grant what now fits to the waiters, oldest first."""
        granted = []
        with self._lock:
            for key, count in needs.items():
                self._in_use[key] = self._in_use.get(key, 0) - count
            while self._waiters and self._fits(self._waiters[0][0]):
                waiter = self._waiters.popleft()
                self._take(waiter[0])
                granted.append(waiter)
            self._lock.notify_all()  # blocked threads look again
        for waiter_needs, future, loop in granted:
            loop.call_soon_threadsafe(_grant, future, self, waiter_needs)

    def wake(self) -> None:
        """The resource map changed (a load): waiters look again."""
        self.release({})

    def _acquire_blocking(self, needs: Needs) -> None:
        with self._lock:
            while self._waiters or not self._fits(needs):
                self._lock.wait()
            self._take(needs)

    async def _acquire(self, needs: Needs) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if not self._waiters and self._fits(needs):
                self._take(needs)
                return
            future: asyncio.Future[None] = loop.create_future()
            self._waiters.append((needs, future, loop))
        await future

    def _fits(self, needs: Needs) -> bool:
        limits = self._limits.current
        return all(
            self._in_use.get(key, 0) + count <= max(limits.get(key, count), count)
            for key, count in needs.items()
        )

    def _take(self, needs: Needs) -> None:
        for key, count in needs.items():
            self._in_use[key] = self._in_use.get(key, 0) + count


def _grant(future: asyncio.Future[None], gate: ResourceGate, needs: Needs) -> None:
    """On the waiter's loop: it holds `needs` now; a waiter gone meanwhile gives them back."""
    if future.cancelled():
        gate.release(needs)
    elif not future.done():
        future.set_result(None)
