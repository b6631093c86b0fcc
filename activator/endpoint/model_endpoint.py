"""One model behind the activator: the façade over its request path, replicas and scaling.

    ModelEndpoint ──▶ admission.Admission          request path: a slot, or the held queue
                  ──▶ reconciler.Reconciler        Decision -> starts and drains
                  ──▶ replica_lifecycle.ReplicaSet start, watch, drain, stop (ScalerBackend)
                  ──▶ cold_start                   how a start from zero goes, and its timing
                  ──▶ direct_load.DirectLoad       connections handed straight to replicas

The parts are wired here and nowhere else; what they tell each other goes through this
module (a ready replica drains the held queue, a failed wake-up fails it, a lost replica
makes the reconciler decide again). Callers (app, fleet, front door) use the methods below
and read state through read-only properties and `status()`, a value snapshot.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from activator.config import ScaleSettings
from activator.direct.handoff import HandoffLink, HandoffLinks
from activator.endpoint.admission import Admission, Slot
from activator.endpoint.autoscaler import Autoscaler, Decision, kept_replicas
from activator.endpoint.cold_start import ColdStartTimer
from activator.endpoint.concurrency import ConcurrencyMeter
from activator.endpoint.direct_load import DirectLoad
from activator.endpoint.held_queue import HeldQueue
from activator.endpoint.reconciler import Reconciler
from activator.endpoint.replica import Replica
from activator.endpoint.replica_lifecycle import ReplicaSet
from activator.endpoint.replica_stats import ModelStatistics, Rows
from activator.endpoint.sequence_routes import SequenceId, SequenceKey, SequenceRoutes
from activator.endpoint.shared_limit import SharedLimits
from activator.errors import ActivationFailed
from activator.observe.metrics import Metrics
from activator.observe.metrics_text import Family
from activator.observe.status_document import (
    ColdStartReport,
    ModelState,
    ModelStatus,
    ReplicaState,
    ReplicaStatus,
)
from activator.scaler.backend import ModelActivity, PeerConcurrency, ScalerBackend

__all__ = ["ModelEndpoint", "ModelState"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Demand:
    """Admission's `Demand`: traffic reaches the autoscaler and the replica set's retry gate."""

    reconciler: Reconciler
    replicas: ReplicaSet

    def request_arrived(self, now: float) -> None:
        self.reconciler.note_request(now)
        self.replicas.request_arrived()

    def wake(self) -> None:
        self.reconciler.poke()


class _SequenceSlot:
    """`async with endpoint.acquire(size, sequence=key)`: the replica the sequence is bound
    to (a slot there, at once), or any, which the sequence is then bound to."""

    __slots__ = ("_endpoint", "_key", "_size", "_slot", "_track")

    def __init__(
        self, endpoint: ModelEndpoint, size: int, key: SequenceKey, *, track: bool = True
    ) -> None:
        self._endpoint = endpoint
        self._size = size
        self._key = key
        self._track = track  # False: the caller says which requests of it went (a stream)

    async def __aenter__(self) -> Replica:
        endpoint, routes = self._endpoint, self._endpoint._sequences
        assert routes is not None  # only stateful models make these
        replica = endpoint._replica_named(routes.replica_for(self._key))
        if replica is None:  # a new sequence: where the fewest live ones are (slots are few)
            free = [r for r in endpoint._replicas.replicas if r.can_take()]
            replica = min(free, key=lambda r: (routes.held_by(r.id), r.in_flight), default=None)
        admission = endpoint._admission
        self._slot = admission.acquire_on(replica) if replica else admission.acquire(self._size)
        chosen = await self._slot.__aenter__()
        if self._track:
            routes.begin(self._key, chosen.id, endpoint._clock())
        return chosen

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        routes = self._endpoint._sequences
        assert routes is not None
        if self._track:
            routes.finish(self._key, self._endpoint._clock())
        await self._slot.__aexit__(exc_type, *rest)


class ModelEndpoint:
    """Request admission, routing and scaling for one model.

    `autoscaler` is injectable so that tests can tell stories through the policy itself.
    `sequence_idle_s` is set for a stateful model: its sequences stick to their replica.
    `loaded` says whether the model is loaded now (explicit model control, activator.fleet.
    load_state): one that is not keeps no `min_replicas` and is handed no connection.
    """

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
        autoscaler: Autoscaler | None = None,
        sequence_idle_s: float | None = None,
        shared_limits: SharedLimits | None = None,
        loaded: Callable[[], bool] = lambda: True,
    ) -> None:
        self._name = name
        self._loaded = loaded
        self._ready_listeners: list[Callable[[Replica], None]] = []
        self._sequences = (
            SequenceRoutes(idle_s=sequence_idle_s) if sequence_idle_s is not None else None
        )
        self._settings = settings
        self._backend = backend
        self._clock = clock
        self._stats = stats or ModelStatistics(name, None)
        self._meter = ConcurrencyMeter(clock())
        self._cold = ColdStartTimer(name, metrics, clock)
        # Backends that hand client connections to replicas (activator.direct.front_door).
        links = backend if isinstance(backend, HandoffLinks) else None
        self._direct = DirectLoad(name, links, metrics)
        self._replicas = ReplicaSet(
            name,
            settings,
            backend,
            metrics,
            self._stats,
            drain_timeout_s=drain_timeout_s,
            clock=clock,
            on_ready=self._replica_ready,
            on_start_failed=self._start_failed,
            on_lost=self._replica_lost,
            on_start_withdrawn=self._start_withdrawn,
            shared_limits=shared_limits,
            quiesce=self._direct.quiesce,
        )
        self._held: HeldQueue[Replica] = HeldQueue(
            max_count=settings.max_held_requests, max_bytes=settings.max_held_bytes, model=name
        )
        self._reconciler = Reconciler(
            name,
            settings,
            autoscaler or Autoscaler(settings),
            self._replicas,
            self._meter,
            self._held,
            self._direct,
            self._cold,
            metrics,
            clock=clock,
            # Active-active activators (Kubernetes): the others' load of this model counts.
            peers=backend if isinstance(backend, PeerConcurrency) else None,
            pinned=self._pinned,
            loaded=loaded,
        )
        self._admission = Admission(
            name,
            settings,
            self._held,
            self._replicas,
            self._meter,
            self._cold,
            _Demand(self._reconciler, self._replicas),
            metrics,
            clock=clock,
            rng=rng or random.Random(),
        )
        if shared_limits is not None:  # another model's request freed a shared replica's slot
            shared_limits.listen(self._slot_freed_elsewhere)

    # ---- request path -------------------------------------------------------------------

    def acquire(
        self, size: int, *, sequence: SequenceKey | None = None, track: bool = True
    ) -> Slot | _SequenceSlot:
        """`async with endpoint.acquire(nbytes) as replica:` a slot on a ready replica.

        Waits in the held queue when no slot is free (503 Overloaded when it is full; 504
        HeldTimeout at the activation timeout; ActivationFailed when the wake-up failed). A
        request of a live sequence (a stateful model) goes to the replica that holds it.
        `track=False`: the replica is chosen by `sequence` but the caller reports each of the
        sequence's requests itself (`sequence_sent` / `sequence_answered`: a gRPC stream).
        """
        if sequence is not None and self._sequences is not None:
            return _SequenceSlot(self, size, sequence, track=track)
        return self._admission.acquire(size)

    def sequence_replica(self, sequence: SequenceKey) -> str | None:
        """The replica a request of `sequence` goes to: the one it is bound to (a START's too:
        it begins the sequence again there), while that is in rotation (None: not bound, or
        its replica out of rotation: any, as `acquire` chooses then)."""
        if self._sequences is None:
            return None
        replica = self._replica_named(self._sequences.replica_for(sequence))
        return replica.id if replica is not None else None

    def sequence_live(self, sequence: SequenceId) -> bool:
        """Whether the routes still hold `sequence` (not ended, not idle past the model's
        `max_sequence_idle_microseconds`, its replica not gone)."""
        return self._sequences is not None and sequence in self._sequences

    def sequence_sent(self, sequence: SequenceKey, replica_id: str) -> None:
        """A request of `sequence` went to `replica_id` (outside `acquire`: a stream's)."""
        if self._sequences is not None:
            self._sequences.begin(sequence, replica_id, self._clock())

    def sequence_answered(self, sequence: SequenceKey) -> None:
        """A request `sequence_sent` reported is answered (or its stream is gone)."""
        if self._sequences is not None:
            self._sequences.finish(sequence, self._clock())

    @property
    def stateful(self) -> bool:
        """A sequence model: requests are routed by their sequence, never handed off."""
        return self._sequences is not None

    def expect_request(self) -> None:
        """A request for this model is on its way (an ensemble that runs it was asked):
        count it as traffic and wake the model now, so that its cold start overlaps the
        ensemble's instead of following it."""
        now = self._clock()
        self._reconciler.note_request(now)
        self._replicas.request_arrived()
        self._reconciler.poke()

    def _replica_named(self, replica_id: str | None) -> Replica | None:
        if replica_id is None:
            return None
        for replica in self._replicas.replicas:
            if replica.id == replica_id and replica.routable:
                return replica
        return None

    def _pinned(self, now: float) -> set[str]:
        return self._sequences.pinned(now) if self._sequences is not None else set()

    def replica_failed(self, replica: Replica, reason: str) -> None:
        """A request saw the replica reset or die: take it out of rotation now."""
        self._replicas.fail(replica, reason)

    def direct_link(self) -> HandoffLink | None:
        """Where to hand a new client connection (activator.direct.front_door), or None: among
        routable replicas whose handoff socket is connected, the least loaded one (never for
        a stateful model: each request must be routed by its sequence, nor for a model not
        loaded: the activator refuses its requests)."""
        if self._sequences is not None or not self._loaded():
            return None
        link = self._direct.choose(self._replicas.replicas, self._settings, held=len(self._held))
        if link is not None:
            self._reconciler.note_request(self._clock())  # a new connection is traffic
        return link

    def directly_connected(self) -> tuple[Replica, ...]:
        """The live replicas (routable or draining) that hold client connections handed to
        them: requests on those never pass the activator (activator.direct)."""
        return tuple(r for r in self._replicas.replicas if not r.dead and self._direct.of(r)[0])

    async def keep_final_statistics(self, replica: Replica) -> None:
        """Read `replica`'s statistics and series for the last time now and keep them for
        good (what it serves later is not counted): it is about to unload the model, after
        which it has none to give (an explicit unload, activator.fleet.fleet)."""
        await self._stats.retire(replica)

    async def statistics(self) -> Rows | None:
        """The model's statistics for the life of `thaw up` (live and retired replicas)."""
        return await self._stats.read(lambda: self._replicas.replicas)

    @property
    def held(self) -> int:
        """Requests held here for a replica (at zero, a wake, every replica busy): pending
        requests of the model, not yet in any replica's queue."""
        return len(self._held)

    async def metric_families(self) -> dict[str, Family]:
        """The model's replicas' Prometheus series for the life of `thaw up` (counters of
        retired replicas kept; gauges of live ones)."""
        return await self._stats.metrics.read(lambda: self._replicas.replicas)

    # ---- scaling path -------------------------------------------------------------------

    def tick(self) -> Decision:
        """Sample concurrency into the autoscaler and reconcile its decision (every tick)."""
        if len(self._held):  # a held request may be due past its release cap by now
            self._admission.dispatch()
        return self._reconciler.tick()

    def poke(self) -> Decision:
        """Decide now (cold-start fast path: a held request at zero starts one replica)."""
        return self._reconciler.poke()

    async def adopt_running(self) -> None:
        """Take over the model's replicas that already run (`ScalerBackend.running_replicas`,
        asked once, at start): they are kept through one idle grace, as after a request,
        then follow the load."""
        try:
            handles = await self._backend.running_replicas(self._name)
        except ActivationFailed as exc:
            logger.warning("model=%s cannot look for running replicas: %s", self._name, exc)
            return
        if handles:
            self._reconciler.note_request(self._clock())
            self._replicas.adopt(handles)

    async def warm(self) -> None:
        """Bring a replica up now and wait for it (the repository `load` call). It waits as
        long as a start may take (`load_timeout_s`), not a held request's activation timeout:
        Triton's load blocks until the model is loaded, however long its load takes."""
        async with self._admission.acquire(0, loading=True):
            pass

    async def scale_to_zero(self, *, wait: bool = True) -> None:
        """Forget recent traffic and drain every replica now (Thaw's own scale-to-zero call,
        the model staying loaded: a request held meanwhile wakes it again); `wait`: until
        they are stopped."""
        self._reconciler.forget()
        await self._replicas.drain(wait=wait)

    async def unload(self, refusal: Exception | None) -> None:
        """The repository unload call: forget recent traffic, answer the requests still held
        with `refusal` (the unloaded model's; None: they stay held, for a replica started
        for them), drain every replica now, and stop a start still under way once it is up:
        nothing serves, or is kept through an idle grace, after the unload. What the other
        activators reported of it before is forgotten too (their requests are refused now)."""
        self._reconciler.forget(peers=True)
        if refusal is not None:
            self._admission.fail_held(refusal)
        await self._replicas.drain_all()

    async def replace_replicas(self, *, wait: bool = True) -> None:
        """The model's files changed: drain every replica now (requests in flight finish)
        and (`wait`) wait until they are stopped; a replica still starting is stopped once
        up, unused. A request meanwhile is held and wakes a replica of the new files."""
        await self._replicas.renew(wait=wait)

    def keep_replicas(self) -> tuple[Replica, ...]:
        """The model's config changed in a way its replicas take in place (activator.fleet.
        in_place): its routable replicas, kept, for the caller to send each the load; a
        replica still starting is stopped once up, unused (it may have read the old config)."""
        return tuple(self._replicas.keep_through_change())

    async def close(self) -> None:
        """Fail held requests, drain every replica, stop background work."""
        self._admission.close()
        self._reconciler.close()
        await self._replicas.close()  # starts in progress finish, then retire themselves

    # ---- what the parts tell each other -----------------------------------------------------

    def add_ready_listener(self, listener: Callable[[Replica], None]) -> None:
        """Call `listener` with each replica of this model as it becomes ready (after the
        endpoint's own bookkeeping; it must not block: e.g. it schedules a task)."""
        self._ready_listeners.append(listener)

    def _replica_ready(self, replica: Replica, first: bool) -> None:
        self._cold.replica_up(replica)
        if first:
            self._meter.restart(replica.ready_at, backlog_s=self._settings.panic_window_s)
            # Kept through one idle grace from now, as after a request: a start that outlived
            # its held requests (504 at the activation timeout) is there for their retries,
            # not drained the moment it is up because its requests came a grace ago.
            self._reconciler.note_request(replica.ready_at)
        self._admission.dispatch()
        for listener in self._ready_listeners:
            listener(replica)

    def _start_failed(self, message: str, refusal: str) -> None:
        if self._replicas.ready_count == 0 and self._replicas.starting == 0:
            self._cold.abandon(message)
            error = ActivationFailed(
                f"model '{self._name}' could not be activated: {message}", refusal=refusal
            )
            self._admission.fail_held(error)

    def _start_withdrawn(self) -> None:
        # A start nobody needed ended (activator.scaler.kubernetes.follower_start): held
        # requests stay held; decide again now, so that requests still waiting start the model
        # at once.
        self._reconciler.poke()

    def _slot_freed_elsewhere(self) -> None:
        if len(self._held):
            self._admission.dispatch()

    def _replica_lost(self, replica: Replica) -> None:
        if self._sequences is not None:
            self._sequences.forget_replica(replica.id)
        self._reconciler.poke()

    # ---- read-only state ------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def settings(self) -> ScaleSettings:
        return self._settings

    @property
    def ready_count(self) -> int:
        """Routable replicas (neither draining nor dead)."""
        return self._replicas.ready_count

    @property
    def desired(self) -> int:
        """Replicas the autoscaler's last decision asked for."""
        return self._reconciler.desired

    @property
    def held_count(self) -> int:
        """Requests held waiting for a slot."""
        return len(self._held)

    @property
    def last_error(self) -> str | None:
        """Why the last start failed or the last replica died; None once one is ready."""
        return self._replicas.last_error

    def activity(self) -> ModelActivity:
        """The model's load now: in flight on its replicas, held, and its last request (what
        shared placement reads before evicting it: activator.scaler.placement)."""
        return ModelActivity(
            in_flight=sum(r.in_flight for r in self._replicas.replicas),
            held=len(self._held),
            last_request_at=self._reconciler.last_request_at,
            pinned=kept_replicas(self._settings, loaded=self._loaded()) > 0,
        )

    @property
    def last_cold_start_s(self) -> float | None:
        """Seconds from the start of the last cold start to its first response."""
        return self._cold.last_s

    def first_token(self, seconds: float, *, cold: bool) -> None:
        """A generative request's time to first token (`cold`: it found no replica ready)."""
        self._cold.first_token(seconds, cold=cold)

    @property
    def cold_starts(self) -> tuple[ColdStartReport, ...]:
        """The model's last cold starts (failed ones included), oldest first."""
        return tuple(self._cold.recent)

    @property
    def running_count(self) -> int:
        """Replicas that run (starting, ready or draining): what the model is spending."""
        live = sum(1 for r in self._replicas.replicas if not r.dead)
        return live + self._replicas.starting

    @property
    def replicas(self) -> tuple[Replica, ...]:
        """The replicas now: routable, draining, or dead and not yet removed."""
        return tuple(self._replicas.replicas)

    @property
    def state(self) -> ModelState:
        if self.ready_count:
            return ModelState.WARM
        if self._replicas.starting:
            waiting = self._replicas.waiting_for_node
            return ModelState.WAITING_FOR_NODE if waiting else ModelState.WAKING
        return ModelState.DRAINING if self._replicas.replicas else ModelState.COLD

    def status(self) -> ModelStatus:
        """The model's line of the status document, now."""
        replicas = tuple(self._replica_status(r) for r in self._replicas.replicas)
        return ModelStatus(
            model=self._name,
            state=self.state,
            replicas_ready=self.ready_count,
            replicas_desired=self.desired,
            replicas_starting=self._replicas.starting,
            held_requests=len(self._held),
            in_flight=sum(r.in_flight for r in replicas),
            direct_connections=sum(r.direct_connections for r in replicas),
            last_cold_start_s=self.last_cold_start_s,
            last_error=self.last_error,
            replicas=replicas,
            placement_class=self._settings.placement_class,
            first_token_cold_s=self._cold.first_token_cold_s,
            first_token_warm_s=self._cold.first_token_warm_s,
        )

    def _replica_status(self, replica: Replica) -> ReplicaStatus:
        connections, direct_in_flight = self._direct.of(replica)
        state = (
            ReplicaState.DEAD
            if replica.dead
            else ReplicaState.DRAINING
            if replica.draining
            else ReplicaState.READY
        )
        return ReplicaStatus(
            id=replica.id,
            url=replica.url,
            pid=replica.handle.pid,
            in_flight=replica.in_flight,
            direct_connections=connections,
            direct_in_flight=direct_in_flight,
            state=state,
        )
