"""A model instance driven from the event loop: its batches are awaited there, one at a time.

    pool.hand(batch) ─▶ submit ─▶ task: await execute(batch) ─▶ pool.next_or_free ─▶ on_done
                                        (an I/O round trip, e.g.      (the next waiting batch
                                         to a stub process)            starts in the same task)

For a backend whose execute is an I/O round trip (`Backend.execute_async`), a worker thread
would only wait on that I/O, and would cost two thread hand-offs per batch (loop → thread →
loop), each a wait for the GIL while the loop is busy. Here the round trip is awaited on the
loop, and the outcomes are reported there directly. Same contract as runtime.instance_worker's
thread, per slot: after each batch, the oldest batch waiting in the pool, else that slot is free.

`slots` > 1 pipelines: while one batch runs in the stub, the next is already on its way there,
so the stub starts it the moment the previous one is done instead of waiting for the loop to
read that answer and send more (on a busy loop that wait was most of a round trip). The stub
still runs them one at a time, in order. Only for a batch that cannot grow by waiting (one
request at a time): a dynamic batch formed early would be a smaller batch.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

from runtime.batch_execution import Outcome
from runtime.instance_worker import Batch, DoneFn, NextBatch

__all__ = ["AsyncExecuteFn", "LoopInstance"]

AsyncExecuteFn = Callable[[Batch], Awaitable[list[Outcome]]]


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

    def start(self, on_done: DoneFn, pool: NextBatch) -> None:
        """Outcomes go to `on_done` (on the loop); after each batch, ask `pool`."""
        self._on_done, self._pool = on_done, pool

    def submit(self, batch: Batch) -> None:
        """Run `batch` in a free slot."""
        task = asyncio.get_running_loop().create_task(self._work(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stop(self) -> None:
        """Nothing more will come to one free slot; stopped once every slot was."""
        self._stops += 1
        if self._stops >= self.slots:
            self._stopped.set()

    def join(self, timeout_s: float) -> bool:
        """Wait until stopped (blocking: never call it on the loop); whether it was in time."""
        return self._stopped.wait(timeout_s)

    async def _work(self, batch: Batch | None) -> None:
        on_done, pool = self._on_done, self._pool
        if on_done is None or pool is None:
            return
        while batch is not None:
            outcomes = await self._execute(batch)
            batch = pool.next_or_free(self)  # before reporting: never idle for the loop
            on_done(self, outcomes)
