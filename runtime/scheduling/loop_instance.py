"""A model instance driven from the event loop: its batches are awaited there, one per slot.

    pool.hand(batch) ─▶ submit ─▶ task: await execute(batch) ─▶ pool.next_or_free ─▶ on_done
                                        (an I/O round trip, e.g.      (the next waiting batch
                                         to a stub process)            starts in the same task)

For a backend whose execute is an I/O round trip (`Backend.execute_async`), a worker thread
would only wait on that I/O, and would cost two thread hand-offs per batch (loop → thread →
loop), each a wait for the GIL while the loop is busy. Here the round trip is awaited on the
loop, and the outcomes are reported there directly. Same contract as
runtime.scheduling.instance_worker's
thread, per slot: after each batch, the oldest batch waiting in the pool, else that slot is free.

`slots` > 1 pipelines: while one batch runs in the stub, the next is already on its way there,
so the stub starts it the moment the previous one is done instead of waiting for the loop to
read that answer and send more (on a busy loop that wait was most of a round trip). The stub
still runs them one at a time, in order. Only for a batch that cannot grow by waiting (one
request at a time): a dynamic batch formed early would be a smaller batch. A batch on its way
still counts as queued, as in Triton: `queued_requests` (the pending count) holds every batch in
flight but the oldest, and a batch's queue time runs until the one ahead of it is answered
(`started` tells the executor when that was).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from runtime.scheduling.batch_execution import Outcome
from runtime.scheduling.instance_worker import Batch, DoneFn, NextBatch

__all__ = ["AsyncExecuteFn", "LoopInstance"]

# (batch, started) -> outcomes; `started()` is when the batch began to run (perf_counter_ns):
# when the batch ahead of it in this instance was answered, or when it was sent.
AsyncExecuteFn = Callable[[Batch, Callable[[], int]], Awaitable[list[Outcome]]]


@dataclass(slots=True, eq=False)
class _InFlight:
    batch: Batch
    started_ns: int = 0  # 0 while a batch ahead of it runs

    def started(self) -> int:
        return self.started_ns


class LoopInstance:
    """One instance whose batches run as tasks on the event loop, up to `slots` at once; call
    `submit` and `stop` on the loop (`join` from any other thread)."""

    on_loop = True

    def __init__(self, name: str, execute: AsyncExecuteFn, *, slots: int = 1) -> None:
        self.name = name
        self.slots = slots
        self._execute = execute
        self._on_done: DoneFn | None = None
        self._pool: NextBatch | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # held: the loop keeps weak references
        self._stops = 0
        self._stopped = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop of the first submit
        self._in_flight: deque[_InFlight] = deque()  # in the order sent: the stub's order
        # Requests in batches behind the running one; written on the loop, read by anyone.
        self.queued_requests = 0

    def start(self, on_done: DoneFn, pool: NextBatch) -> None:
        """Outcomes go to `on_done` (on the loop); after each batch, ask `pool`."""
        self._on_done, self._pool = on_done, pool

    def submit(self, batch: Batch) -> None:
        """Run `batch` in a free slot."""
        loop = self._loop
        # Asked once (again if that loop has stopped): get_running_loop() costs a getpid()
        # system call on Python 3.11.
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        task = loop.create_task(self._work(self._sent(batch)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _sent(self, batch: Batch) -> _InFlight:
        item = _InFlight(batch)
        if self._in_flight:
            self.queued_requests += len(batch)
        else:
            item.started_ns = time.perf_counter_ns()
        self._in_flight.append(item)
        return item

    def _answered(self, item: _InFlight) -> None:
        in_flight = self._in_flight
        if in_flight[0] is item:
            in_flight.popleft()
            if in_flight:  # the next one starts now
                head = in_flight[0]
                head.started_ns = time.perf_counter_ns()
                self.queued_requests -= len(head.batch)
        else:  # answered out of order (its stub was restarted): it was never the running one
            in_flight.remove(item)
            self.queued_requests -= len(item.batch)

    def stop(self) -> None:
        """Nothing more will come to one free slot; stopped once every slot was."""
        self._stops += 1
        if self._stops >= self.slots:
            self._stopped.set()

    def join(self, timeout_s: float) -> bool:
        """Wait until stopped (blocking: never call it on the loop); whether it was in time."""
        return self._stopped.wait(timeout_s)

    async def _work(self, item: _InFlight | None) -> None:
        on_done, pool = self._on_done, self._pool
        if on_done is None or pool is None:
            return
        while item is not None:
            outcomes = await self._execute(item.batch, item.started)
            self._answered(item)
            following = pool.next_or_free(self)  # before reporting: never idle for the loop
            item = self._sent(following) if following is not None else None
            on_done(self, outcomes)
