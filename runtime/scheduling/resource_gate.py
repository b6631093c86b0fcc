"""Triton's execution_count rate limiter, at execution: an instance runs a batch only while it
holds every resource its `rate_limiter` names, and gives them back when the batch is done.

    gate = ResourceGate(limits)                     limits: rate_limit.ResourceLimits' map
    run = gate.holding({(0, "R1"): 8}, run)         a worker thread's execute, gated
    run = gate.holding_async({(0, "R1"): 8}, run)   a loop instance's execute, gated

A resource's count is the resource map's (`--rate-limit-resource`, else the largest need of any
loaded instance); a need is taken whole or not at all, so two instances never hold part of what
each needs while waiting for the rest (no deadlock). An instance whose need is not in the map yet
(its load has not finished) counts its own need as the limit. Waiting instances are served as
Triton's rate limiter serves them: lowest `(executions + 1) x priority` first (an instance of
priority 2 gets half the turns of one of priority 1 while both wait), a tie to the instance of
higher priority (the lower number), then arrival order. The `+ 1` (the rank the instance has
once its next execution is done) and the tie rule are what Triton 2.51 was seen to do with
L0_rate_limiter's two models: priority 1 runs twice before priority 2's first turn, from an
empty start and after priority 2 ran alone; with `executions x priority` the first turns
alternated, and the test's ratio (80:45) fell under its 1.8 where Triton's is 80:44. As
Triton stages an instance that has more requests again before it allocates what that
instance gave back, resources given back by an instance that would rank before every waiter
are kept for its next execution for a moment (`restage_s`, 20 ms): it usually returns at
once; if it does not, the waiters are served.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from runtime.scheduling.rate_limit import InstanceNeeds, ResourceKey, ResourceLimits

__all__ = ["Needs", "ResourceGate"]

Needs = Mapping[ResourceKey, int]
P = ParamSpec("P")
T = TypeVar("T")


class _Turns:
    """One gated instance's executions so far and its priority: its scaled priority after its
    next execution, `(executions + 1) * priority`, orders the waiters (lowest first), and a tie
    goes to the higher priority (module docstring)."""

    __slots__ = ("executions", "priority")

    def __init__(self, priority: int) -> None:
        self.executions = 0
        self.priority = priority

    def rank(self) -> tuple[int, int]:
        return (self.executions + 1) * self.priority, self.priority


# How long resources given back are kept for the instance that gave them back when it ranks
# first (it is usually back within microseconds; a loaded machine's thread switch is slower).
_RESTAGE_S = 0.02


@dataclass(order=True)
class _Waiter:
    """An instance waiting for its resources: served by (scaled priority, arrival)."""

    rank: tuple[tuple[int, int], int]  # (the instance's rank, arrival)
    needs: Needs = field(compare=False)
    turns: _Turns = field(compare=False)
    # How the grant reaches it: a thread's event, or a future on its loop.
    event: threading.Event | None = field(default=None, compare=False)
    future: asyncio.Future[None] | None = field(default=None, compare=False)
    loop: asyncio.AbstractEventLoop | None = field(default=None, compare=False)


class ResourceGate:
    """The resources in use by running executions, server-wide; any thread, and the loop."""

    def __init__(self, limits: ResourceLimits, *, restage_s: float = _RESTAGE_S) -> None:
        self._limits = limits
        self._restage_s = restage_s
        self._lock = threading.Lock()
        self._in_use: dict[ResourceKey, int] = {}
        self._waiters: list[_Waiter] = []  # a heap by rank
        self._arrivals = itertools.count()
        # An instance that just finished and ranks before every waiter: what it gave back is
        # kept for its next execution for `restage_s` (module docstring).
        self._reserved: _Turns | None = None
        self._reservation: threading.Timer | None = None
        self._token: object | None = None

    def holding(self, needs: Needs, run: Callable[P, T]) -> Callable[P, T]:
        """`run` (blocking, in a worker thread) executed while holding `needs`."""
        turns = _Turns(_priority(needs))

        def gated(*args: P.args, **kwargs: P.kwargs) -> T:
            self._acquire_blocking(needs, turns)
            try:
                return run(*args, **kwargs)
            finally:
                self._release(needs, turns)

        return gated

    def holding_async(
        self, needs: Needs, run: Callable[P, Awaitable[T]]
    ) -> Callable[P, Awaitable[T]]:
        """`run` (awaited on the loop) executed while holding `needs`, one execution at a
        time: an instance with a batch in flight is not waiting for resources for its next
        one (Triton stages an instance only once it is free), so a second batch of the same
        instance never stands before another instance in the queue."""
        turns = _Turns(_priority(needs))
        one_at_a_time = asyncio.Lock()

        async def gated(*args: P.args, **kwargs: P.kwargs) -> T:
            async with one_at_a_time:
                await self._acquire(needs, turns)
                try:
                    return await run(*args, **kwargs)
                finally:
                    self._release(needs, turns)

        return gated

    def release(self, needs: Needs) -> None:
        """Give `needs` back; grant what now fits to the waiters."""
        self._release(needs, None)

    def wake(self) -> None:
        """The resource map changed (a load): waiters look again."""
        self.release({})

    def _release(self, needs: Needs, turns: _Turns | None) -> None:
        """Give `needs` back. When `turns` (the instance that held them) would rank before
        every waiter at its next execution, keep them for it a moment (it is usually back at
        once, its queue not empty: Triton stages it again before it allocates); else grant
        the waiters in rank order, stopping at the first that does not fit (as Triton's
        staging queue: a large need is not passed over for ever by smaller ones)."""
        with self._lock:
            for key, count in needs.items():
                self._in_use[key] = self._in_use.get(key, 0) - count
            if turns is not None and self._waiters and turns.rank() < self._waiters[0].rank[0]:
                self._reserve(turns)
                return
            granted = self._grant_locked()
        _notify(granted, self)

    def _reserve(self, turns: _Turns) -> None:
        self._cancel_reservation()
        self._reserved = turns
        token = object()  # this reservation: a timer of an earlier one must not end it
        timer = threading.Timer(self._restage_s, self._expire, (token,))
        timer.daemon = True
        self._reservation, self._token = timer, token
        timer.start()

    def _expire(self, token: object) -> None:
        """The reserving instance did not come back in time: the waiters go on."""
        with self._lock:
            if self._token is not token or self._reserved is None:
                return
            self._reserved = self._reservation = None
            granted = self._grant_locked()
        _notify(granted, self)

    def _cancel_reservation(self) -> None:
        if self._reservation is not None:
            self._reservation.cancel()
        self._reserved = self._reservation = None

    def _grant_locked(self) -> list[_Waiter]:
        granted: list[_Waiter] = []
        if self._reserved is not None:
            return granted
        while self._waiters and self._fits(self._waiters[0].needs):
            waiter = heapq.heappop(self._waiters)
            self._take(waiter.needs, waiter.turns)
            granted.append(waiter)
        return granted

    def _takes_now(self, needs: Needs, turns: _Turns) -> bool:
        """Under the lock: `turns` takes `needs` at once (it ranks first and they fit)."""
        if self._reserved is turns:
            self._cancel_reservation()
        elif self._reserved is not None:
            return False
        if self._waiters and turns.rank() >= self._waiters[0].rank[0]:
            return False
        if not self._fits(needs):
            return False
        self._take(needs, turns)
        return True

    def _acquire_blocking(self, needs: Needs, turns: _Turns) -> None:
        with self._lock:
            if self._takes_now(needs, turns):
                return
            event = threading.Event()
            self._enqueue(needs, turns, event=event)
            granted = self._grant_locked()  # a reservation just cancelled frees its share
        _notify(granted, self)
        event.wait()

    async def _acquire(self, needs: Needs, turns: _Turns) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._takes_now(needs, turns):
                return
            future: asyncio.Future[None] = loop.create_future()
            self._enqueue(needs, turns, future=future, loop=loop)
            granted = self._grant_locked()
        _notify(granted, self)
        await future

    def _enqueue(self, needs: Needs, turns: _Turns, **grant: Any) -> None:
        heapq.heappush(
            self._waiters, _Waiter((turns.rank(), next(self._arrivals)), needs, turns, **grant)
        )

    def _fits(self, needs: Needs) -> bool:
        limits = self._limits.current
        return all(
            self._in_use.get(key, 0) + count <= max(limits.get(key, count), count)
            for key, count in needs.items()
        )

    def _take(self, needs: Needs, turns: _Turns) -> None:
        for key, count in needs.items():
            self._in_use[key] = self._in_use.get(key, 0) + count
        turns.executions += 1


def _notify(granted: list[_Waiter], gate: ResourceGate) -> None:
    """Outside the lock: each granted waiter learns it holds its needs."""
    for waiter in granted:
        if waiter.event is not None:
            waiter.event.set()
        elif waiter.future is not None and waiter.loop is not None:
            waiter.loop.call_soon_threadsafe(_grant, waiter.future, gate, waiter.needs)


def _priority(needs: Needs) -> int:
    return needs.priority if isinstance(needs, InstanceNeeds) else 1


def _grant(future: asyncio.Future[None], gate: ResourceGate, needs: Needs) -> None:
    """On the waiter's loop: it holds `needs` now; a waiter gone meanwhile gives them back."""
    if future.cancelled():
        gate.release(needs)
    elif not future.done():
        future.set_result(None)
