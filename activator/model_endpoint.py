"""One model behind the activator: holds requests, routes them, and scales its replicas.

The request path is `acquire()`: take a free replica slot (power of two choices over ready
replicas) or join the model's FIFO held queue, which a ready replica or a freed slot drains.
The scaling path is `tick()` / `poke()`: an autoscaler Decision is reconciled against the
replicas that exist, starting them through the ScalerBackend or draining them (stop routing,
let in-flight finish, stop the process).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from activator.autoscaler import Autoscaler, Decision
from activator.balancer import pick
from activator.breaker import Breaker
from activator.concurrency import ConcurrencyMeter
from activator.config import ScaleSettings
from activator.errors import ActivationFailed, HeldTimeout
from activator.handoff import HandoffLink, HandoffLinks
from activator.held_queue import HeldQueue, HeldRequest
from activator.metrics import Metrics
from activator.replica import Replica
from activator.replica_stats import ModelStatistics
from activator.scaler.backend import ScalerBackend

__all__ = ["ModelEndpoint", "ModelState"]

logger = logging.getLogger(__name__)

_CRASH_LOOP_S = 10.0  # a replica that dies sooner than this after ready counts as a failed start


class ModelState(StrEnum):
    COLD = "cold"  # no replica, none starting
    WAKING = "waking"  # a replica is starting, none ready
    WARM = "warm"  # at least one replica routable
    DRAINING = "draining"  # only replicas on their way out


@dataclass
class _ColdStart:
    """A start from zero that requests wait for; timed until its first response."""

    started_at: float
    replica: str = ""


class _Slot:
    """The scope of `ModelEndpoint.acquire`: one request's slot on a replica. A class, not a
    generator-based context manager, because every request enters one."""

    __slots__ = ("_endpoint", "_replica", "_size")

    def __init__(self, endpoint: ModelEndpoint, size: int) -> None:
        self._endpoint = endpoint
        self._size = size

    async def __aenter__(self) -> Replica:
        self._replica = await self._endpoint._admit(self._size)
        return self._replica

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self._endpoint._leave(self._replica, ok=exc_type is None)


class ModelEndpoint:
    """Request admission, routing and scaling for one model."""

    def __init__(
        self,
        name: str,
        settings: ScaleSettings,
        backend: ScalerBackend,
        metrics: Metrics,
        *,
        drain_timeout_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        stats: ModelStatistics | None = None,
    ) -> None:
        self.name = name
        self.settings = settings
        self._backend = backend
        self._metrics = metrics
        self._drain_timeout_s = drain_timeout_s
        self._clock = clock
        self._rng = rng or random.Random()
        self.stats = stats or ModelStatistics(name, None)
        self.autoscaler = Autoscaler(settings)
        self.meter = ConcurrencyMeter(clock())
        self.held: HeldQueue[Replica] = HeldQueue(
            max_count=settings.max_held_requests, max_bytes=settings.max_held_bytes, model=name
        )
        self.replicas: list[Replica] = []
        self.starting = 0
        self.desired = 0
        self.last_error: str | None = None
        self.last_cold_start_s: float | None = None
        self._cold: _ColdStart | None = None
        self._retry_needs_request = False  # after a failed start, only a new request retries
        # Backends that hand client connections to replicas (activator.front_door).
        self._links = backend if isinstance(backend, HandoffLinks) else None
        self._tasks: set[asyncio.Task[None]] = set()
        self._watchers: set[asyncio.Task[None]] = set()
        self._closed = False
        self._publish()

    # ---- request path -------------------------------------------------------------------

    def acquire(self, size: int) -> _Slot:
        """`async with endpoint.acquire(nbytes) as replica:` a slot on a ready replica.

        Waits in the held queue when no slot is free (503 Overloaded when it is full; 504
        HeldTimeout at the activation timeout; ActivationFailed when the wake-up failed).
        """
        return _Slot(self, size)

    async def _admit(self, size: int) -> Replica:
        """Entering `acquire`: count the request, take a free slot or hold for one."""
        if self._closed:
            raise ActivationFailed(f"model '{self.name}': the activator is shutting down")
        now = self._clock()
        self.meter.change(now, +1)
        self.autoscaler.note_request(now)
        self._retry_needs_request = False
        # Fast path: nothing is waiting and a replica has a free slot (no queue, no await).
        replica = None if len(self.held) else self._take_free()
        if replica is None:
            try:
                replica = await self._hold(size)
            except BaseException:
                self.meter.change(self._clock(), -1)
                raise
        return replica

    def _leave(self, replica: Replica, *, ok: bool) -> None:
        """Leaving `acquire`: free the slot for the oldest held request (if any)."""
        try:
            replica.breaker.release()
            if replica.in_flight == 0:
                replica.idle.set()
            if ok and replica.cold_start_t0 is not None:
                self._finish_cold_start(replica)
            if len(self.held):  # nothing else changed when nobody waits: no dispatch
                self._dispatch()
        finally:
            self.meter.change(self._clock(), -1)

    def _take_free(self) -> Replica | None:
        replica = pick(self.replicas, self._rng)
        if replica is not None and replica.breaker.try_take():
            return replica
        return None

    async def _hold(self, size: int) -> Replica:
        now = self._clock()
        future: asyncio.Future[Replica] = asyncio.get_running_loop().create_future()
        item = HeldRequest(size, now + self.settings.activation_timeout_s, now, future)
        self.held.push(item)
        self.poke()
        self._dispatch()
        try:
            await asyncio.wait({future}, timeout=self.settings.activation_timeout_s)
        except asyncio.CancelledError:
            # The client went away while held: never forward it; give back a granted slot.
            self.held.remove(item)
            if future.done() and not future.cancelled() and future.exception() is None:
                future.result().breaker.release()
                self._dispatch()
            future.cancel()
            raise
        finally:
            self.held.remove(item)
            self._publish()
        if not future.done():
            future.cancel()
            raise self._held_timeout()
        return future.result()

    def _held_timeout(self) -> HeldTimeout:
        waited = f"{self.settings.activation_timeout_s:g} s"
        if any(r.can_take() or r.in_flight for r in self.replicas):
            return HeldTimeout(f"request for model '{self.name}' waited {waited} for a free slot")
        why = f"; last error: {self.last_error}" if self.last_error else ""
        return HeldTimeout(f"model '{self.name}' did not become ready within {waited}{why}")

    def _dispatch(self) -> None:
        """Hand free slots to held requests, oldest first."""
        while len(self.held):
            replica = self._take_free()
            if replica is None:
                break
            item = self.held.pop()
            if item is None:
                replica.breaker.release()
                break
            item.future.set_result(replica)
        self._publish()

    def _fail_held(self, error: Exception) -> None:
        for item in self.held.drain():
            if not item.future.done():
                item.future.set_exception(error)
        self._publish()

    def replica_failed(self, replica: Replica, reason: str) -> None:
        """A request saw the replica reset or die: take it out of rotation now."""
        if replica.dead or replica not in self.replicas:
            return
        logger.warning("replica %s model=%s out of rotation: %s", replica.id, self.name, reason)
        replica.dead = True
        self.last_error = f"replica {replica.id} failed: {reason}"
        self._spawn(self._retire(replica, timeout_s=1.0))

    # ---- scaling path -------------------------------------------------------------------

    @property
    def ready_count(self) -> int:
        return sum(1 for r in self.replicas if not (r.draining or r.dead))

    def tick(self) -> Decision:
        """Sample concurrency into the autoscaler and reconcile its decision (every tick)."""
        now = self._clock()
        mean, peak = self.meter.sample(now)
        direct_mean, direct_now = self._direct_load(now)  # requests that bypass the activator
        if self.ready_count:
            # Requests held while no replica is ready are a wake-up signal, not a measure of
            # the capacity needed: a burst at zero would otherwise pin max_replicas for a
            # whole stable window. Once a replica serves, a queue that remains is seen here.
            self.autoscaler.observe(now, mean + direct_mean, peak=peak + direct_now)
        current = self.meter.current + direct_now
        return self._apply(self.autoscaler.decide(now, self.ready_count, current=current))

    # ---- direct connections (activator.front_door) -----------------------------------------

    def direct_link(self) -> HandoffLink | None:
        """Where to hand a new client connection: among ready, non-draining replicas whose
        handoff socket is connected, the one with the fewest direct connections + in flight."""
        settings = self.settings
        if self._links is None or not settings.direct_connections or len(self.held):
            return None
        if settings.container_concurrency:  # a per-replica limit: every request through here
            return None
        best: HandoffLink | None = None
        best_load = 0
        for replica in self.replicas:
            link = None if replica.draining or replica.dead else self._link(replica)
            if link is None or not link.connected:
                continue
            load = link.connections + link.in_flight + replica.in_flight
            if best is None or load < best_load:
                best, best_load = link, load
        if best is not None:
            self.autoscaler.note_request(self._clock())  # a new connection is traffic
        return best

    def _link(self, replica: Replica) -> HandoffLink | None:
        return None if self._links is None else self._links.handoff_link(replica.id)

    def _direct_load(self, now: float) -> tuple[float, int]:
        """(mean in-flight since the last tick, in flight now) on direct connections."""
        mean, current, connections = 0.0, 0, 0
        for replica in self.replicas:
            link = self._link(replica)
            if link is not None:
                mean += link.sample(now)
                current += link.in_flight
                connections += link.connections
        self._metrics.direct_connections.labels(self.name).set(connections)
        return mean, current

    def poke(self) -> Decision:
        """Decide now (cold-start fast path: a held request at zero starts one replica)."""
        now = self._clock()
        decision = self.autoscaler.decide(now, self.ready_count, current=self.meter.current)
        return self._apply(decision)

    def _apply(self, decision: Decision) -> Decision:
        if self._closed:
            return decision
        if decision.desired != self.desired:
            direction = "up" if decision.desired > self.desired else "down"
            self._metrics.scale_decisions.labels(self.name, direction).inc()
            logger.info(
                "scale model=%s %d -> %d (%s)",
                self.name,
                self.desired,
                decision.desired,
                decision.reason,
            )
            self.desired = decision.desired
        missing = self.desired - self.ready_count - self.starting
        if self.ready_count == 0:
            # Exactly one start per cold start (more only for min_replicas): extra processes
            # would compete with the first for the CPUs and the warm pool.
            missing = min(missing, max(1, self.settings.min_replicas) - self.starting)
        if missing > 0 and not (self._retry_needs_request and not len(self.held)):
            for _ in range(missing):
                self._start_one()
        surplus = self.ready_count - self.desired
        if surplus > 0 and self.starting == 0:
            idle_first = sorted(
                (r for r in self.replicas if not (r.draining or r.dead)),
                key=lambda r: (r.in_flight, -r.ready_at),
            )
            for replica in idle_first[:surplus]:
                self._spawn(self._retire(replica, timeout_s=self._drain_timeout_s))
        self._publish()
        return decision

    def _start_one(self) -> None:
        # A cold start is a start from nothing that requests are waiting for; it is timed from
        # here to its first response. Starts by the autoscaler alone are not cold starts.
        if self.ready_count == 0 and self.starting == 0:
            self._cold = _ColdStart(started_at=self._clock()) if len(self.held) else None
        self.starting += 1
        self._spawn(self._start())

    async def _start(self) -> None:
        try:
            info = await self._backend.start_replica(
                self.name, timeout_s=self.settings.activation_timeout_s
            )
        except ActivationFailed as exc:
            self.starting -= 1
            self._start_failed(exc.message)
            return
        except Exception as exc:  # a backend bug must still fail the waiters, not hang them
            logger.exception("model=%s replica start crashed", self.name)
            self.starting -= 1
            self._start_failed(f"internal error starting a replica: {exc!r}")
            return
        except BaseException:
            self.starting -= 1
            raise
        self.starting -= 1
        self._metrics.replica_starts.labels(self.name, "ok").inc()
        now = self._clock()
        replica = Replica(info, Breaker(self.settings.container_concurrency), ready_at=now)
        if self._cold is not None and not self._cold.replica:
            self._cold.replica = info.id
            replica.cold_start_t0 = self._cold.started_at
            cold = self._metrics.cold_start
            cold.labels(self.name, "claim").observe(info.claim_s)
            cold.labels(self.name, "restore").observe(info.restore_s)
        if self.ready_count == 0:
            self.meter.restart(now, backlog_s=self.settings.panic_window_s)
        self.replicas.append(replica)
        self.last_error = None
        self._spawn(self._watch(replica), into=self._watchers)
        if self._closed:
            self._spawn(self._retire(replica, timeout_s=self._drain_timeout_s))
        self._dispatch()

    def _start_failed(self, message: str) -> None:
        self._metrics.replica_starts.labels(self.name, "failed").inc()
        logger.warning("model=%s replica start failed: %s", self.name, message)
        self.last_error = message
        self._retry_needs_request = True
        if self.ready_count == 0 and self.starting == 0:
            self._cold = None
            error = ActivationFailed(f"model '{self.name}' could not be activated: {message}")
            self._fail_held(error)

    def _finish_cold_start(self, replica: Replica) -> None:
        now = self._clock()
        assert replica.cold_start_t0 is not None  # checked by the caller
        total = now - replica.cold_start_t0
        self._metrics.cold_start.labels(self.name, "warmup").observe(now - replica.ready_at)
        self._metrics.cold_start.labels(self.name, "total").observe(total)
        self.last_cold_start_s = total
        replica.cold_start_t0 = None
        self._cold = None
        logger.info("model=%s cold start served in %.3f s", self.name, total)

    async def _watch(self, replica: Replica) -> None:
        reason = await self._backend.wait_lost(replica.id)
        if replica in self.replicas and not replica.draining:
            logger.warning("replica %s model=%s died: %s", replica.id, self.name, reason)
            if self._clock() - replica.ready_at < _CRASH_LOOP_S:
                # Died right after starting: a crash loop. Only waiting requests (or the next
                # request) start another, so an idle broken model does not restart forever.
                self._retry_needs_request = True
            replica.dead = True
            self.last_error = f"replica {replica.id} died: {reason}"
            self.replicas.remove(replica)
            await self._backend.stop_replica(replica.id, timeout_s=1.0)
            self._publish()
            self.poke()

    async def _retire(self, replica: Replica, *, timeout_s: float) -> None:
        """Drain: stop routing, let in-flight requests finish (bounded), stop the process."""
        replica.draining = True
        self._publish()
        if replica.in_flight:
            replica.idle.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(replica.idle.wait(), timeout_s)
        if not self._closed:
            await self.stats.retire(replica)  # its counts outlive it (no await until removed)
        if replica in self.replicas:
            self.replicas.remove(replica)
        await self._backend.stop_replica(replica.id, timeout_s=self._drain_timeout_s)
        self._publish()

    def _spawn(self, coro: Any, *, into: set[asyncio.Task[None]] | None = None) -> None:
        tasks = self._tasks if into is None else into
        task = asyncio.get_running_loop().create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error("model=%s background task failed", self.name, exc_info=task.exception())

    async def warm(self) -> None:
        """Bring a replica up now and wait for it (the repository `load` call)."""
        async with self.acquire(0):
            pass

    async def scale_to_zero(self) -> None:
        """Forget recent traffic and drain every replica now (the repository `unload` call)."""
        self.autoscaler.forget()
        self.meter.sample(self._clock())  # traffic before the unload must not count after it
        self.desired = 0
        live = [r for r in self.replicas if not (r.draining or r.dead)]
        await asyncio.gather(*(self._retire(r, timeout_s=self._drain_timeout_s) for r in live))

    # ---- lifecycle and reporting ----------------------------------------------------------

    async def close(self) -> None:
        """Fail held requests, drain every replica, stop background work."""
        self._closed = True
        self._fail_held(ActivationFailed(f"model '{self.name}': the activator is shutting down"))
        for replica in list(self.replicas):
            if not replica.draining:
                self._spawn(self._retire(replica, timeout_s=self._drain_timeout_s))
        # Starts in progress finish (and retire themselves because _closed is set).
        while self._tasks:
            await asyncio.wait(list(self._tasks))
        for task in list(self._watchers):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._watchers, return_exceptions=True)

    @property
    def state(self) -> ModelState:
        if self.ready_count:
            return ModelState.WARM
        if self.starting:
            return ModelState.WAKING
        return ModelState.DRAINING if self.replicas else ModelState.COLD

    def status(self) -> dict[str, Any]:
        return {
            "model": self.name,
            "state": self.state.value,
            "replicas_ready": self.ready_count,
            "replicas_desired": self.desired,
            "replicas_starting": self.starting,
            "held_requests": len(self.held),
            "in_flight": sum(r.in_flight for r in self.replicas),
            "direct_connections": sum(self._direct_status(r)[0] for r in self.replicas),
            "last_cold_start_s": self.last_cold_start_s,
            "last_error": self.last_error,
            "replicas": [
                {
                    "id": r.id,
                    "url": r.url,
                    "pid": r.info.pid,
                    "in_flight": r.in_flight,
                    "direct_connections": self._direct_status(r)[0],
                    "direct_in_flight": self._direct_status(r)[1],
                    "state": "dead" if r.dead else "draining" if r.draining else "ready",
                }
                for r in self.replicas
            ],
        }

    def _direct_status(self, replica: Replica) -> tuple[int, int]:
        link = self._link(replica)
        return (0, 0) if link is None else (link.connections, link.in_flight)

    def _publish(self) -> None:
        self._metrics.replicas.labels(self.name, "desired").set(self.desired)
        self._metrics.replicas.labels(self.name, "ready").set(self.ready_count)
        self._metrics.held.labels(self.name).set(len(self.held))
