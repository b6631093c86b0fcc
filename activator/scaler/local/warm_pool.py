"""The local backend's pool of idle `thaw serve` processes: sized to demand, never dry.

Processes come from a `ProcessSource` (activator.scaler.local.process_source): forked by the fork
server when it runs, spawned otherwise. How many are kept idle is `PoolPolicy`'s decision
(activator.scaler.local.pool_policy): at least `--warm-pool`, as many as models woke within the
recent window, within `--pool-memory-bytes`. A claim takes an idle process; when there is none it
starts one for itself at once (with the fork server: a fork, ready in about 0.1 s), so the
pool never makes a wake-up wait for a refill. Refills after a claim wait `refill_delay_s`, so
a new process does not compete for the CPUs with the replica's restore and first inference.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import aiohttp

from activator.errors import ActivationFailed
from activator.scaler.backend import PoolStatus
from activator.scaler.local.pool_policy import PoolDecision, PoolPolicy
from activator.scaler.local.process_memory import pss_bytes, tree_pss_bytes
from activator.scaler.local.process_source import ProcessSource
from activator.scaler.local.replica_process import ReplicaProcess

__all__ = ["WarmPool"]

logger = logging.getLogger(__name__)

# Re-measure the idle processes' memory this often, and when one joins: reading a process's
# smaps_rollup walks its page tables (a few ms each), a measurable cost for an idle activator.
_PSS_EVERY_S = 30.0
_MAINTAIN_EVERY_S = 1.0  # how often the pool re-decides its size when nothing happens


class WarmPool:
    """Idle runtime processes ready to be claimed; `maintain()` runs its sizing loop."""

    def __init__(
        self,
        policy: PoolPolicy,
        sources: Sequence[ProcessSource],
        args: Callable[[], list[str]],
        session: aiohttp.ClientSession,
        *,
        start_timeout_s: float,
        stop_timeout_s: float = 10.0,
        refill_delay_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self._sources = list(sources)
        self._args = args
        self._session = session
        self._start_timeout_s = start_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._refill_delay_s = refill_delay_s
        self._clock = clock
        self._idle: list[ReplicaProcess] = []
        self._starting = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._closed = False
        self._refill_after = 0.0  # no refill starts before this time of `clock`
        self._pss: dict[str, int] = {}  # idle process name -> bytes, as last measured
        self._server_pss: int | None = None
        self._pss_at = float("-inf")
        self._last: PoolDecision = policy.decide(clock(), idle=0)
        self.last_start_s: float | None = None  # the last process's start -> ready
        self.starts = 0
        self.failures = 0
        self._maintainer: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    # -- sizing -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the sizing loop (fills the pool to its first target at once)."""
        self._maintainer = asyncio.get_running_loop().create_task(self._maintain())

    async def _maintain(self) -> None:
        while not self._closed:
            if self._clock() - self._pss_at >= _PSS_EVERY_S:
                await self._measure()
            self.resize()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_MAINTAIN_EVERY_S):
                    await self._changed.wait()
            self._changed.clear()

    def resize(self) -> PoolDecision:
        """Decide, then start or stop processes to reach the target (returns at once)."""
        now = self._clock()
        self._idle = [p for p in self._idle if p.alive]
        decision = self.policy.decide(
            now,
            idle=len(self._idle),
            idle_pss=[self._pss[p.name] for p in self._idle if p.name in self._pss],
            server_bytes=self._server_pss or 0,
        )
        if decision.target != self._last.target:
            logger.info(
                "warm pool target %d (demand %d, limited by %s, %d MiB per process)",
                decision.target, decision.demand, decision.limit,
                decision.process_bytes >> 20,
            )  # fmt: skip
        self._last = decision
        for proc in self._idle[len(self._idle) - decision.surplus :] if decision.surplus else []:
            self._idle.remove(proc)
            self._spawn_task(self._stop(proc))
        missing = decision.target - len(self._idle) - self._starting
        if missing > 0 and now >= self._refill_after and self.failures <= 3:
            for _ in range(missing):
                self._starting += 1
                self._spawn_task(self._fill_one())
        return decision

    async def _measure(self) -> None:
        """Read the idle processes' and the fork server's PSS (in a thread: /proc reads)."""
        self._pss_at = self._clock()
        idle = [(p.name, p.proc.pid) for p in self._idle]
        server = self._source().server_pid()

        def read() -> tuple[dict[str, int], int | None]:
            sizes = {name: b for name, pid in idle if (b := tree_pss_bytes(pid)) is not None}
            return sizes, (pss_bytes(server) if server is not None else None)

        self._pss, self._server_pss = await asyncio.to_thread(read)

    # -- processes --------------------------------------------------------------------------
    def _source(self) -> ProcessSource:
        return next((s for s in self._sources if s.available()), self._sources[-1])

    async def _start_ready(self, name: str, deadline: float) -> ReplicaProcess:
        """A new process, ready (not yet loaded) by `deadline` (time.monotonic)."""
        started = time.monotonic()
        source = self._source()
        try:
            proc = await source.start_process(self._args(), name)
        except ActivationFailed:
            if source is self._sources[-1] or self._source() is source:
                raise
            logger.info("warm pool: %s unavailable, using %s", source.kind, self._source().kind)
            proc = await self._source().start_process(self._args(), name)
        try:
            await proc.wait_ready(self._session, deadline)
        except BaseException:
            await proc.stop(self._stop_timeout_s)
            raise
        self.last_start_s = time.monotonic() - started
        self.starts += 1
        self.failures = 0
        logger.debug("warm pool: %s ready in %.3f s (%s)", name, self.last_start_s, source.kind)
        return proc

    async def _fill_one(self) -> None:
        name = f"pool-{next(self._ids)}"
        try:
            proc = await self._start_ready(name, time.monotonic() + self._start_timeout_s)
        except (ActivationFailed, OSError) as exc:
            self.failures += 1
            if not self._closed:
                logger.warning("warm-pool process failed to start: %s", exc)
            return
        finally:
            self._starting -= 1
        if self._closed:
            await proc.stop(self._stop_timeout_s)
            return
        self._idle.append(proc)
        self._pss_at = float("-inf")  # measure the newcomer at the next decision
        self._changed.set()
        logger.info("warm-pool process %s ready at %s", proc.name, proc.url)

    async def claim(self, model: str, deadline: float) -> ReplicaProcess:
        """An idle ready process (now the caller's to load and stop), else one started now.

        Records the wake for the policy; later refills wait `refill_delay_s` so that the new
        replica's load and first inferences have the CPUs to themselves.
        """
        self.policy.note_wake(self._clock(), model)
        self._refill_after = self._clock() + self._refill_delay_s
        proc = None
        while self._idle and proc is None:
            candidate = self._idle.pop(0)
            proc = candidate if candidate.alive else None
        self._changed.set()
        if proc is not None:
            return proc
        self._starting += 1  # counted, so a refill racing it does not start a second one
        try:
            return await self._start_ready(f"{model}-claim-{next(self._ids)}", deadline)
        finally:
            self._starting -= 1

    def refill_later(self) -> None:
        """A claimed process was loaded (or failed): refill after `refill_delay_s`."""
        self._refill_after = self._clock() + self._refill_delay_s
        loop = asyncio.get_running_loop()
        loop.call_later(self._refill_delay_s, self._changed.set)

    async def _stop(self, proc: ReplicaProcess) -> None:
        code = await proc.stop(self._stop_timeout_s)
        logger.info("warm-pool process %s stopped as surplus (exit code %s)", proc.name, code)

    def _spawn_task(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- report -----------------------------------------------------------------------------
    @property
    def ready_count(self) -> int:
        return sum(1 for p in self._idle if p.alive)

    def status(self) -> PoolStatus:
        d = self._last
        return PoolStatus(
            size=d.target,
            ready=self.ready_count,
            starting=self._starting,
            source=self._source().kind,
            idle_pss_bytes=tuple(self._pss.get(p.name, 0) for p in self._idle if p.alive),
            server_pss_bytes=self._server_pss,
            budget_bytes=self.policy.settings.budget_bytes,
            demand=d.demand,
            limit=d.limit.value,
            last_start_s=self.last_start_s,
            starts=self.starts,
            failures=self.failures,
        )

    async def close(self) -> None:
        self._closed = True
        if self._maintainer is not None:
            self._maintainer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintainer
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        procs, self._idle = self._idle, []
        await asyncio.gather(*(p.stop(self._stop_timeout_s) for p in procs))
        for source in self._sources:
            await source.close()
