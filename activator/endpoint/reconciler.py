"""Scale reconciliation of one model: the autoscaler's Decision made real.

Every tick (`tick`) the concurrency seen since the last one, in the activator and on direct
connections, is sampled into the autoscaler, and its Decision is reconciled against the
replicas that exist (`apply`): missing ones are started (at most one at a time from zero:
`cold_start.replicas_to_start`), surplus ones drained, idle first. A held request decides at
once (`poke`: the cold-start fast path). The policy is `activator.endpoint.autoscaler`'s; this
module only observes and acts. `loaded` says whether the model is loaded now (explicit model
control, docs/decisions/0024): one that is not keeps no `min_replicas` (`kept_replicas`).

With active-active activators (Kubernetes) the model's concurrency on the *other* activators
comes in through `peers` (`PeerConcurrency`) and is added to what this one observes, so every
activator scales on the fleet's total (the scaling leader's backend then starts pods, a
follower's attaches to them); demand appearing elsewhere pokes this reconciler at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Set, Sized

from activator.config import ScaleSettings
from activator.endpoint.autoscaler import Autoscaler, Decision, kept_replicas
from activator.endpoint.cold_start import ColdStartTimer, replicas_to_start
from activator.endpoint.concurrency import ConcurrencyMeter
from activator.endpoint.direct_load import DirectLoad
from activator.endpoint.replica import Replica
from activator.endpoint.replica_lifecycle import ReplicaSet
from activator.observe.metrics import Metrics
from activator.scaler.backend import PeerConcurrency, PeerLoad

__all__ = ["Reconciler"]

logger = logging.getLogger(__name__)


class Reconciler:
    """Keeps one model's replica count at its autoscaler's desired count."""

    def __init__(
        self,
        model: str,
        settings: ScaleSettings,
        autoscaler: Autoscaler,
        replicas: ReplicaSet,
        meter: ConcurrencyMeter,
        held: Sized,
        direct: DirectLoad,
        cold: ColdStartTimer,
        metrics: Metrics,
        *,
        clock: Callable[[], float],
        peers: PeerConcurrency | None = None,
        pinned: Callable[[float], Set[str]] = lambda now: frozenset(),
        loaded: Callable[[], bool] = lambda: True,
    ) -> None:
        self._model = model
        self._loaded = loaded
        # Replicas that hold live sequences (activator.endpoint.sequence_routes): never drained, and
        # the model keeps a replica while there are any.
        self._pinned = pinned
        self._settings = settings
        self._autoscaler = autoscaler
        self._replicas = replicas
        self._meter = meter
        self._held = held
        self._direct = direct
        self._cold = cold
        self._metrics = metrics
        self._clock = clock
        self._peers = peers
        self._peer = PeerLoad()  # the other activators' concurrency, at the last exchange
        self._last_mean = 0.0
        self.desired = 0
        self.last_request_at: float | None = None  # the last traffic (activity of the model)
        self._closed = False
        self._publish()
        if peers is not None:
            peers.watch_demand(model, self.poke)

    def note_request(self, now: float) -> None:
        """Traffic arrived (a request, a direct connection): the idle grace starts again."""
        self.last_request_at = now
        self._autoscaler.note_request(now)

    def tick(self) -> Decision:
        """Sample concurrency into the autoscaler and reconcile its decision (every tick)."""
        now = self._clock()
        if self._pinned(now):
            self.note_request(now)  # live sequences are traffic in progress
        mean, peak = self._meter.sample(now)
        # Requests on direct connections bypass the activator: their replicas report them.
        direct_mean, direct_now = self._direct.sample(self._replicas.replicas, now)
        own_now = self._meter.current + direct_now
        peer = self._exchange(mean + direct_mean, own_now)
        ready = self._replicas.ready_count
        if ready:
            # Requests held while no replica is ready are a wake-up signal, not a measure of
            # the capacity needed: a burst at zero would otherwise pin max_replicas for a
            # whole stable window. Once a replica serves, a queue that remains is seen here.
            observed = mean + direct_mean + peer.mean
            self._autoscaler.observe(now, observed, peak=peak + direct_now + peer.current)
        current = own_now + peer.current
        return self.apply(self._decide(now, ready, current))

    def poke(self) -> Decision:
        """Decide now (cold-start fast path: a held request at zero starts one replica)."""
        now = self._clock()
        ready = self._replicas.ready_count
        current = self._meter.current + self._exchange(self._last_mean, self._meter.current).current
        return self.apply(self._decide(now, ready, current))

    def _decide(self, now: float, ready: int, current: int) -> Decision:
        return self._autoscaler.decide(now, ready, current=current, loaded=self._loaded())

    def _exchange(self, mean: float, current: int) -> PeerLoad:
        """Tell the other activators this one's concurrency; learn theirs (none without)."""
        if self._peers is not None:
            self._last_mean = mean
            self._peer = self._peers.exchange(self._model, mean=mean, current=current)
        return self._peer

    def apply(self, decision: Decision) -> Decision:
        """Start or drain replicas toward `decision.desired`."""
        if self._closed:
            return decision
        if decision.desired != self.desired:
            direction = "up" if decision.desired > self.desired else "down"
            self._metrics.scale_decisions.labels(self._model, direction).inc()
            logger.info(
                "scale model=%s %d -> %d (%s)",
                self._model,
                self.desired,
                decision.desired,
                decision.reason,
            )
            self.desired = decision.desired
        self._start_missing()
        self._drain_surplus()
        self._publish()
        return decision

    def _start_missing(self) -> None:
        replicas = self._replicas
        count = replicas_to_start(
            desired=self.desired,
            ready=replicas.ready_count,
            starting=replicas.starting,
            min_replicas=kept_replicas(self._settings, loaded=self._loaded()),
        )
        waiting = len(self._held) + self._peer.current  # here, or held on another activator
        if count == 0 or (replicas.retry_needs_request and not waiting):
            return
        for _ in range(count):
            if replicas.ready_count == 0 and replicas.starting == 0:
                # A start from nothing: a cold start when requests wait for it, timed from
                # here to its first response. Starts by the autoscaler alone are not.
                self._cold.begin(requests_waiting=len(self._held) > 0)
            replicas.start()

    def _drain_surplus(self) -> None:
        replicas = self._replicas
        surplus = replicas.ready_count - self.desired
        if surplus <= 0 or replicas.starting:
            return
        pinned = self._pinned(self._clock())
        candidates = [r for r in replicas.routable() if r.id not in pinned]
        idle_first = sorted(candidates, key=self._drain_order)
        for replica in idle_first[:surplus]:
            replicas.retire(replica)

    def _drain_order(self, replica: Replica) -> tuple[int, int, float]:
        """Which replica a scale-down drains first: the least work in flight, in-path and on
        its direct connections (a drain waits for those: ReplicaSet.retire), then the fewest
        direct clients to move, then the newest."""
        connections, direct_in_flight = self._direct.of(replica)
        return (replica.in_flight + direct_in_flight, connections, -replica.ready_at)

    def forget(self, *, peers: bool = False) -> None:
        """Forget recent traffic (before it must not count after it) and want no replica;
        `peers` (an unload): what the other activators last reported of the model too."""
        if peers and self._peers is not None:
            self._peers.forget_demand(self._model)
            self._peer = PeerLoad()
        self._autoscaler.forget()
        self._meter.sample(self._clock())
        self.desired = 0
        self._publish()

    def close(self) -> None:
        """Decide nothing more: the model is shutting down."""
        self._closed = True

    def _publish(self) -> None:
        self._metrics.replicas.labels(self._model, "desired").set(self.desired)
