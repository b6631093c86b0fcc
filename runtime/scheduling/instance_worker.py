"""One model instance's thread: runs the batches the dispatcher hands it, one at a time.

Also the `Instance` Protocol the dispatcher and the instance pool see: this thread, or an
instance driven from the event loop (runtime.scheduling.loop_instance).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from runtime.scheduling.batch_execution import Outcome, QueuedRequest

__all__ = ["Batch", "DoneFn", "ExecuteFn", "Instance", "InstanceWorker", "NextBatch"]

Batch = Sequence[QueuedRequest]
ExecuteFn = Callable[[Batch], list[Outcome]]
DoneFn = Callable[["Instance", list[Outcome]], None]


class NextBatch(Protocol):
    """Where a worker that finished a batch finds its next one
    (runtime.scheduling.instance_pool)."""

    def next_or_free(self, worker: Instance) -> Batch | None: ...


class Instance(Protocol):
    """One model instance as the dispatcher drives it: up to `slots` batches at a time (each
    slot is free or holds one batch), then the next waiting one from `pool`, or free again.
    `on_loop` says where it reports a batch's outcomes to `on_done`: on the event loop itself
    (True), or from its own thread (False). `stop` comes once per slot, each while free."""

    name: str
    on_loop: bool
    slots: int
    queued_requests: int  # requests it holds that have not started (a pipeline's tail)

    def start(self, on_done: DoneFn, pool: NextBatch) -> None: ...
    def submit(self, batch: Batch) -> None: ...
    def stop(self) -> None: ...
    def join(self, timeout_s: float) -> bool: ...


class InstanceWorker:
    """A thread bound to one backend instance (through `execute`), fed by the dispatcher.

    After each batch it asks `pool` for a batch that waited for an instance; if there is none,
    the pool marks it free and it blocks on its own queue, which then receives one batch, or
    one stop marker: no worker can take another's stop. Each batch's outcomes go to `on_done`,
    called in this worker's thread (the dispatcher passes them on to the event loop with
    `call_soon_threadsafe`).
    """

    on_loop = False
    slots = 1
    queued_requests = 0

    def __init__(self, name: str, execute: ExecuteFn) -> None:
        self.name = name
        self._execute = execute
        self._queue: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._on_done: DoneFn | None = None
        self._pool: NextBatch | None = None

    def start(self, on_done: DoneFn, pool: NextBatch) -> None:
        """Start the thread: outcomes go to `on_done`; after each batch, ask `pool`."""
        self._on_done, self._pool = on_done, pool
        self._thread.start()

    def submit(self, batch: Batch) -> None:
        """Run `batch` next (only while the worker is free: it holds one batch at a time)."""
        self._queue.put(batch)

    def stop(self) -> None:
        """Exit (only while the worker is free)."""
        self._queue.put(None)

    def join(self, timeout_s: float) -> bool:
        """Wait for the thread to exit; whether it did within `timeout_s` (blocking)."""
        if self._thread.ident is None:  # never started
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _work(self) -> None:
        on_done, pool, own = self._on_done, self._pool, self._queue
        if on_done is None or pool is None:
            return
        batch = own.get()
        while batch is not None:
            outcomes = self._execute(batch)
            following = pool.next_or_free(self)  # before reporting: never idle for the loop
            on_done(self, outcomes)
            batch = following if following is not None else own.get()
