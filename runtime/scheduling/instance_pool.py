"""Which instances of a model version are free, and the batches formed while none was.

The one structure the dispatcher (on the event loop) and the instance workers (in their
threads) share, under one lock, so that a worker's "nothing waiting: I am free" and the
loop's "nobody free: this batch waits" can never cross: a batch never waits while an instance
is free, and a worker that finishes takes the oldest waiting batch at once, without a round
trip through the loop. Invariant: a worker is in `free` exactly while it is idle (or about to
block on its own empty queue), and then nothing is waiting.

An instance update (a reload that changes only the instance groups) adds workers, and retires
others: a retired worker gets no new batch; each of its slots is stopped once free (at once if
free now, else when it finishes its batch), so a batch it runs always completes.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence

from runtime.scheduling.instance_worker import Batch, Instance

__all__ = ["InstancePool"]


class InstancePool:
    """Free workers' slots (longest-free first, so work spreads) and batches waiting for one."""

    def __init__(self, workers: Sequence[Instance]) -> None:
        self._lock = threading.Lock()
        # One entry per free slot, every instance's first slot before anyone's second (work
        # spreads over instances before it queues behind one).
        depth = max((w.slots for w in workers), default=0)
        self._free: deque[Instance] = deque(
            w for level in range(depth) for w in workers if w.slots > level
        )
        self._waiting: deque[Batch] = deque()
        # Each retired worker still running batches, by id(), with its busy slots; it is held
        # here, so its id cannot be reused by a new worker while it is in this map.
        self._retiring: dict[int, tuple[Instance, int]] = {}
        # Requests in waiting batches; written under the lock, read by anyone (an int).
        self.waiting_requests = 0

    def has_room(self, lookahead: int) -> bool:
        """Whether a batch formed now would start at once, or may wait (`lookahead` batches
        may wait for an instance)."""
        with self._lock:
            return bool(self._free) or len(self._waiting) < lookahead

    def hand(self, batch: Batch) -> None:
        """Give `batch` to the longest-free worker; with none free, it waits for the first."""
        with self._lock:
            worker = self._free.popleft() if self._free else None
            if worker is None:
                self._waiting.append(batch)
                self.waiting_requests += len(batch)
        if worker is not None:
            worker.submit(batch)

    def next_or_free(self, worker: Instance) -> Batch | None:
        """For a worker that finished a batch (its thread): the oldest waiting batch, or None
        after marking it free (after stopping that slot, for a retired worker)."""
        with self._lock:
            retiring = self._retiring.get(id(worker))
            if retiring is None and self._waiting:
                batch = self._waiting.popleft()
                self.waiting_requests -= len(batch)
                return batch
            if retiring is None:
                self._free.append(worker)
                return None
            busy = retiring[1] - 1
            if busy:
                self._retiring[id(worker)] = (worker, busy)
            else:
                del self._retiring[id(worker)]
        worker.stop()  # this slot is free now: the worker's own queue gets its stop
        return None

    def add(self, workers: Sequence[Instance]) -> None:
        """New workers (started), free; the batches waiting go to them at once."""
        depth = max((w.slots for w in workers), default=0)
        handed: list[tuple[Instance, Batch]] = []
        with self._lock:
            self._free.extend(w for level in range(depth) for w in workers if w.slots > level)
            while self._free and self._waiting:
                batch = self._waiting.popleft()
                self.waiting_requests -= len(batch)
                handed.append((self._free.popleft(), batch))
        for worker, batch in handed:
            worker.submit(batch)

    def retire(self, worker: Instance) -> None:
        """`worker` gets no new batch: its free slots stop now, its busy ones once done."""
        with self._lock:
            free = sum(1 for w in self._free if w is worker)
            if free:
                self._free = deque(w for w in self._free if w is not worker)
            if worker.slots > free:
                self._retiring[id(worker)] = (worker, worker.slots - free)
        for _ in range(free):
            worker.stop()

    def take_free(self) -> list[Instance]:
        """Every free slot's worker (a worker once per free slot), no longer free (to stop
        them)."""
        with self._lock:
            workers = list(self._free)
            self._free.clear()
            return workers
