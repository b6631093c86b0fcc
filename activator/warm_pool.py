"""A pool of `thaw serve` processes that imported their frameworks but hold no model.

Each pooled process is started independently (never forked from a process that ran torch) with
`--preload-frameworks` and `--arena-bytes`, so a cold model skips the interpreter start and the
framework import. A claim takes a ready process; the pool refills in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable

import aiohttp

from activator.errors import ActivationFailed
from activator.scaler.replica_process import ReplicaProcess

__all__ = ["WarmPool"]

logger = logging.getLogger(__name__)


class WarmPool:
    """Keeps `size` idle runtime processes ready to be claimed."""

    def __init__(
        self,
        size: int,
        argv: Callable[[], list[str]],
        session: aiohttp.ClientSession,
        *,
        start_timeout_s: float,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self.size = size
        self._argv = argv
        self._session = session
        self._start_timeout_s = start_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._ready: list[ReplicaProcess] = []
        self._starting = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._closed = False
        self._refill_timer: asyncio.TimerHandle | None = None
        self.failures = 0

    @property
    def ready_count(self) -> int:
        return sum(1 for p in self._ready if p.alive)

    def refill(self, *, delay_s: float = 0.0) -> None:
        """Start processes until ready + starting reaches `size` (returns immediately).

        With `delay_s`, the starts begin that much later: a process starting (interpreter,
        framework imports, arena pre-faulting: seconds of CPU) next to a replica that was just
        loaded would slow that replica's first inferences, the end of its cold start.
        """
        if delay_s > 0:
            if self._refill_timer is None or self._refill_timer.cancelled():
                loop = asyncio.get_running_loop()
                self._refill_timer = loop.call_later(delay_s, self._timed_refill)
            return
        self._ready = [p for p in self._ready if p.alive]
        # After repeated failures stop retrying in a tight loop; the next claim tries again.
        while not self._closed and len(self._ready) + self._starting < self.size:
            self._starting += 1
            task = asyncio.create_task(self._start_one())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            if self.failures > 3:
                break

    def _timed_refill(self) -> None:
        self._refill_timer = None
        self.refill()

    async def _start_one(self) -> None:
        proc: ReplicaProcess | None = None
        try:
            proc = await ReplicaProcess.spawn(self._argv(), f"pool-{next(self._ids)}")
            await proc.wait_ready(self._session, time.monotonic() + self._start_timeout_s)
        except asyncio.CancelledError:
            if proc is not None:  # closing: never leave a half-started process behind
                await proc.stop(self._stop_timeout_s)
            raise
        except (ActivationFailed, OSError) as exc:
            self.failures += 1
            if not self._closed:
                logger.warning("warm-pool process failed to start: %s", exc)
            if proc is not None:
                await proc.stop(self._stop_timeout_s)
            return
        finally:
            self._starting -= 1
        if self._closed:
            await proc.stop(self._stop_timeout_s)
            return
        self.failures = 0
        self._ready.append(proc)
        logger.info("warm-pool process %s ready at %s", proc.name, proc.url)

    def claim(self) -> ReplicaProcess | None:
        """A ready idle process (now yours to load and stop), or None.

        The caller calls `refill()` once its load is done, with a delay that lets the new
        replica answer its first requests: starting a replacement (framework imports, arena
        pre-faulting) during the load or the first inference would compete for the CPUs.
        """
        proc = None
        while self._ready and proc is None:
            candidate = self._ready.pop(0)
            proc = candidate if candidate.alive else None
        return proc

    async def close(self) -> None:
        self._closed = True
        if self._refill_timer is not None:
            self._refill_timer.cancel()
            self._refill_timer = None
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        procs, self._ready = self._ready, []
        await asyncio.gather(*(p.stop(self._stop_timeout_s) for p in procs))
