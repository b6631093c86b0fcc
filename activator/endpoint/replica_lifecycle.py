"""The replicas of one model: start them through the scaler backend, watch, drain and stop them.

`ReplicaSet` owns the model's replica list and every task that changes it. A start ends in a
ready `Replica` (routable at once) or a failed start; a replica leaves by being drained
(`retire`: stop routing, let in-flight requests finish, fold its statistics, stop it) or by
dying (the backend's `wait_lost` returns). What the rest of the endpoint does about each
change (dispatch held requests, fail them, decide again) is its callbacks': `on_ready`,
`on_start_failed`, `on_lost`. Nothing here decides how many replicas there should be.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any

from activator.config import ScaleSettings
from activator.endpoint.breaker import Breaker
from activator.endpoint.replica import Replica
from activator.endpoint.replica_stats import ModelStatistics
from activator.endpoint.shared_limit import SharedLimits
from activator.errors import ActivationFailed, RuntimeRefused, StartWithdrawn
from activator.observe.metrics import Metrics
from activator.scaler.backend import NodeWait, ReplicaHandle, ScalerBackend

__all__ = ["CRASH_LOOP_S", "ReplicaSet"]

logger = logging.getLogger(__name__)

CRASH_LOOP_S = 10.0
"""A replica that dies sooner than this after it was ready counts as a failed start."""
_FAILED_STOP_S = 1.0  # stopping a replica that failed or died: nothing to drain


def _named_limit(message: str, elapsed_s: float, settings: ScaleSettings) -> str:
    """A failed start's message, naming the setting that bounds a start when it ran that
    long (a user who sees "did not load within 600 s" learns what to raise)."""
    limit_s = settings.start_timeout_s
    if elapsed_s < limit_s:
        return message
    name = "load_timeout_s" if limit_s == settings.load_timeout_s else "activation_timeout_s"
    flag = name.replace("_", "-")
    return f"{message} (a replica start may take `{name}` = {limit_s:g} s: thaw.{name}, --{flag})"


class ReplicaSet:
    """One model's replicas and the starts in progress."""

    def __init__(
        self,
        model: str,
        settings: ScaleSettings,
        backend: ScalerBackend,
        metrics: Metrics,
        stats: ModelStatistics,
        *,
        drain_timeout_s: float,
        clock: Callable[[], float],
        on_ready: Callable[[Replica, bool], None],
        on_start_failed: Callable[[str, str], None],
        on_lost: Callable[[Replica], None],
        on_start_withdrawn: Callable[[], None] = lambda: None,
        shared_limits: SharedLimits | None = None,
        quiesce: Callable[[Replica, float], Awaitable[None]] | None = None,
    ) -> None:
        self._model = model
        # Waits (within the seconds given) until the clients busy on a draining replica's
        # direct connections have left it (activator.endpoint.direct_load).
        self._quiesce = quiesce
        self._settings = settings
        self._backend = backend
        self._metrics = metrics
        self._stats = stats
        self._drain_timeout_s = drain_timeout_s
        self._clock = clock
        self._on_ready = on_ready  # (replica, first ready of the model)
        # (message, the replica's refusal of the model's load or ""), after last_error is set
        self._on_start_failed = on_start_failed
        self._on_lost = on_lost  # a replica died and is gone
        self._on_start_withdrawn = on_start_withdrawn  # a start ended with nothing, no failure
        # A replica shared with other models (`handle.host`) takes slots of the host's limit too.
        self._shared_limits = shared_limits
        self._replicas: list[Replica] = []
        self._starting = 0
        self.last_error: str | None = None
        # After a failed start or a crash loop, only a request starts another (no restart
        # loop of an idle broken model); cleared by `request_arrived`.
        self._retry_needs_request = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._watchers: set[asyncio.Task[None]] = set()
        self._starts: set[asyncio.Task[None]] = set()  # in `_tasks` too
        self._closed = False
        # Counts `renew`, `keep_through_change` and `drain_all` calls: a start begun before
        # the latest one read old files, or serves a model since unloaded (stopped unused).
        self._generation = 0
        self._publish()

    # ---- what the rest of the endpoint reads ----------------------------------------------

    @property
    def replicas(self) -> Sequence[Replica]:
        """Every replica still known: routable, draining, or dead and not yet removed (a
        live, read-only view: the request path reads it for every request)."""
        return self._replicas

    @property
    def starting(self) -> int:
        """Starts in progress."""
        return self._starting

    @property
    def ready_count(self) -> int:
        return sum(1 for r in self._replicas if r.routable)

    def routable(self) -> list[Replica]:
        return [r for r in self._replicas if r.routable]

    def serving(self) -> bool:
        """Some replica takes requests or still has some in flight."""
        return any(r.can_take() or r.in_flight for r in self._replicas)

    @property
    def retry_needs_request(self) -> bool:
        """A start failed or a replica crash-looped: only a request may start another."""
        return self._retry_needs_request

    @property
    def waiting_for_node(self) -> bool:
        """A start waits for a node to be provisioned (a backend with `NodeWait`)."""
        backend = self._backend
        return isinstance(backend, NodeWait) and backend.waiting_for_node(self._model)

    def hold_until(self) -> float | None:
        """Until when held requests may wait past their activation timeout, for a start that
        waits or waited for a node (None: no such start)."""
        backend = self._backend
        return backend.hold_until(self._model) if isinstance(backend, NodeWait) else None

    def request_arrived(self) -> None:
        """A request came in: after a failed start, it may start another."""
        self._retry_needs_request = False

    # ---- starting ---------------------------------------------------------------------------

    def start(self) -> None:
        """Begin one replica start (returns at once; `on_ready` or `on_start_failed` follows)."""
        self._starting += 1
        self._spawn(self._start(), also=self._starts)

    async def _start(self) -> None:
        generation = self._generation
        # The start's own limit, not the held requests' (`activation_timeout_s`): they may
        # get their 504 first, and the start goes on, to serve the requests after them.
        limit_s = self._settings.start_timeout_s
        began = self._clock()
        try:
            handle = await self._backend.start_replica(self._model, timeout_s=limit_s)
        except StartWithdrawn as exc:
            self._starting -= 1
            self._start_withdrawn(exc.message)
            return
        except ActivationFailed as exc:
            self._starting -= 1
            message = _named_limit(exc.message, self._clock() - began, self._settings)
            # A runtime that read the model and refused its load: its own words, kept.
            self._start_failed(message, exc.reason if isinstance(exc, RuntimeRefused) else "")
            return
        except Exception as exc:  # a backend bug must still fail the waiters, not hang them
            logger.exception("model=%s replica start crashed", self._model)
            self._starting -= 1
            self._start_failed(f"internal error starting a replica: {exc!r}")
            return
        except BaseException:
            self._starting -= 1
            raise
        self._starting -= 1
        self._metrics.replica_starts.labels(self._model, "ok").inc()
        if generation != self._generation:
            # The model's files changed while it started (`renew`), or it was unloaded
            # (`drain_all`): stopped unused; the endpoint decides again (a request still
            # waiting starts another).
            logger.info("replica %s model=%s started before its model was changed or "
                        "unloaded: stopped", handle.id, self._model)  # fmt: skip
            self._spawn(self._backend.stop_replica(handle.id, timeout_s=self._drain_timeout_s))
            self._on_start_withdrawn()
            return
        self._add(handle, first=self.ready_count == 0)

    def _add(self, handle: ReplicaHandle, *, first: bool) -> None:
        shared = None
        if handle.host is not None and self._shared_limits is not None:
            shared = self._shared_limits.for_host(handle.host)
        breaker = Breaker(self._settings.container_concurrency, shared)
        replica = Replica(handle, breaker, self._clock())
        self._replicas.append(replica)
        self.last_error = None
        self._publish()
        self._spawn(self._watch(replica), into=self._watchers)
        if self._closed:
            self._spawn(self._retire(replica, timeout_s=self._drain_timeout_s))
        self._on_ready(replica, first)

    def _start_failed(self, message: str, refusal: str = "") -> None:
        self._metrics.replica_starts.labels(self._model, "failed").inc()
        logger.warning("model=%s replica start failed: %s", self._model, message)
        self.last_error = message
        self._retry_needs_request = True
        self._on_start_failed(message, refusal)

    def _start_withdrawn(self, message: str) -> None:
        self._metrics.replica_starts.labels(self._model, "withdrawn").inc()
        logger.info("model=%s replica start withdrawn: %s", self._model, message)
        # Nothing needed it: only waiting requests (here or elsewhere) start another, so a
        # model nobody asks for is not started again at every tick.
        self._retry_needs_request = True
        self._on_start_withdrawn()

    def adopt(self, handles: Iterable[ReplicaHandle]) -> None:
        """Take over replicas that already run (`ScalerBackend.running_replicas`)."""
        for handle in handles:
            url = handle.url
            logger.info("replica %s model=%s found running at %s", handle.id, self._model, url)
            self._add(handle, first=self.ready_count == 0)

    # ---- leaving ------------------------------------------------------------------------------

    def retire(self, replica: Replica, *, timeout_s: float | None = None) -> None:
        """Drain `replica` in the background (default: the drain timeout); it is routed no
        new request from now on."""
        drain_s = self._drain_timeout_s if timeout_s is None else timeout_s
        replica.draining = True
        self._publish()
        self._spawn(self._retire(replica, timeout_s=drain_s))

    async def renew(self, *, wait: bool = True) -> None:
        """The model's files changed: drain every routable replica now and (`wait`) wait
        until they are stopped; a start in progress is stopped once it is up, never routed
        to. A failed start's error was about the old files: it is forgotten (readiness, the
        index). Without `wait` the drains run on after the return (`drain`)."""
        self._generation += 1
        self.last_error = None
        await self.drain(wait=wait)

    async def drain_all(self) -> None:
        """The model was unloaded: drain every routable replica now and wait until they are
        stopped; a start in progress is stopped once it is up, never routed to (it would
        serve a model that is gone, and stay for an idle grace)."""
        self._generation += 1
        await self.drain()

    def keep_through_change(self) -> list[Replica]:
        """The model's config changed in a way its replicas take in place (an instance
        update): a start in progress, which may have read the old config, is stopped once it
        is up, as at `renew`; the routable replicas stay, returned to be sent the load."""
        self._generation += 1
        self.last_error = None
        return self.routable()

    async def drain(self, *, wait: bool = True) -> None:
        """Drain every routable replica now and (`wait`) wait until they are stopped. Without
        `wait` they are out of rotation at the return and stop in the background: a call
        carried by one of them (a handed-off connection's) cannot wait for its stop, which
        waits for its connections to be quiet."""
        live = self.routable()
        if not wait:
            for replica in live:
                self.retire(replica)
            return
        await asyncio.gather(*(self._retire(r, timeout_s=self._drain_timeout_s) for r in live))

    def fail(self, replica: Replica, reason: str) -> None:
        """A request saw the replica reset or die: take it out of rotation now."""
        if replica.dead or replica not in self._replicas:
            return
        logger.warning("replica %s model=%s out of rotation: %s", replica.id, self._model, reason)
        replica.dead = True
        self.last_error = f"replica {replica.id} failed: {reason}"
        self._publish()
        self._spawn(self._retire(replica, timeout_s=_FAILED_STOP_S))

    async def _watch(self, replica: Replica) -> None:
        reason = await self._backend.wait_lost(replica.id)
        if replica not in self._replicas or replica.draining:
            return
        logger.warning("replica %s model=%s died: %s", replica.id, self._model, reason)
        if self._clock() - replica.ready_at < CRASH_LOOP_S:
            # Died right after starting: a crash loop. Only waiting requests (or the next
            # request) start another, so an idle broken model does not restart forever.
            self._retry_needs_request = True
        replica.dead = True
        self.last_error = f"replica {replica.id} died: {reason}"
        self._replicas.remove(replica)
        self._publish()
        await self._backend.stop_replica(replica.id, timeout_s=_FAILED_STOP_S)
        self._on_lost(replica)

    async def _retire(self, replica: Replica, *, timeout_s: float) -> None:
        """Drain: stop routing, let in-flight requests finish (bounded), stop the replica."""
        replica.draining = True
        self._publish()
        deadline = self._clock() + timeout_s
        if replica.in_flight:
            replica.idle.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await replica.idle.wait()
        if self._quiesce is not None and not self._closed and not replica.dead:
            # A scale-down (not a shutdown: nobody is left to reconnect to): the replica still
            # counts (its direct load too) until its keep-alive clients are gone.
            await self._quiesce(replica, max(0.0, deadline - self._clock()))
        if not self._closed:
            await self._stats.retire(replica)  # its counts outlive it (no await until removed)
        if replica in self._replicas:
            self._replicas.remove(replica)
        await self._backend.stop_replica(replica.id, timeout_s=self._drain_timeout_s)
        self._publish()

    async def close(self) -> None:
        """Drain every replica, cancel starts in progress (the backend gives back what a
        cancelled start claimed), and stop watching."""
        self._closed = True
        # A start may run up to `load_timeout_s` (minutes): shutting down does not wait it out.
        for task in list(self._starts):
            task.cancel()
        for replica in list(self._replicas):
            if not replica.draining:
                self.retire(replica)
        while self._tasks:
            await asyncio.wait(list(self._tasks))
        for task in list(self._watchers):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._watchers, return_exceptions=True)

    # ---- background tasks and the gauge -------------------------------------------------------

    def _spawn(
        self,
        coro: Coroutine[Any, Any, None],
        *,
        into: set[asyncio.Task[None]] | None = None,
        also: set[asyncio.Task[None]] | None = None,
    ) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        for tasks in (self._tasks if into is None else into, also):
            if tasks is not None:
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error("model=%s background task failed", self._model, exc_info=task.exception())

    def _publish(self) -> None:
        self._metrics.replicas.labels(self._model, "ready").set(self.ready_count)
