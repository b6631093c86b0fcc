"""Direct connections of one model: which replica takes the next one, and the load they carry.

A backend that hands client connections to its replicas (activator.direct.handoff.HandoffLinks)
takes the activator out of their data path; their requests never pass the held queue or a
breaker, so the autoscaler adds the load the replicas report on those connections to what it
observes here.
"""

from __future__ import annotations

from collections.abc import Iterable

from activator.config import ScaleSettings
from activator.direct.handoff import HandoffLink, HandoffLinks
from activator.endpoint.replica import Replica
from activator.observe.metrics import Metrics

__all__ = ["DirectLoad"]


class DirectLoad:
    """The handoff links of one model's replicas (none when the backend hands nothing off)."""

    def __init__(self, model: str, links: HandoffLinks | None, metrics: Metrics) -> None:
        self._model = model
        self._links = links
        self._metrics = metrics

    def choose(
        self, replicas: Iterable[Replica], settings: ScaleSettings, *, held: int
    ) -> HandoffLink | None:
        """Where to hand a new client connection: among routable replicas whose handoff
        socket is connected, the one with the fewest direct connections + in flight; None
        when connections must come through the activator (disabled, a per-replica limit,
        requests held: they keep their order)."""
        if self._links is None or not settings.direct_connections or held:
            return None
        if settings.container_concurrency:  # a per-replica limit: every request through here
            return None
        best: HandoffLink | None = None
        best_load = 0
        for replica in replicas:
            link = self.link(replica) if replica.routable else None
            if link is None or not link.connected:
                continue
            load = link.connections + link.in_flight + replica.in_flight
            if best is None or load < best_load:
                best, best_load = link, load
        return best

    def link(self, replica: Replica) -> HandoffLink | None:
        return None if self._links is None else self._links.handoff_link(replica.id)

    def sample(self, replicas: Iterable[Replica], now: float) -> tuple[float, int]:
        """(mean in flight since the last sample, in flight now) on direct connections;
        publishes the model's open direct connections."""
        mean, current, connections = 0.0, 0, 0
        for replica in replicas:
            link = self.link(replica)
            if link is not None:
                mean += link.sample(now)
                current += link.in_flight
                connections += link.connections
        self._metrics.direct_connections.labels(self._model).set(connections)
        return mean, current

    async def quiesce(self, replica: Replica, timeout_s: float) -> None:
        """Before a draining replica is stopped: wait, at most `timeout_s`, until its direct
        connections are quiet (HandoffLink.quiesce). A replica stopped under keep-alive clients
        busy on them drops the request one sent the instant before its last answer (a 502 or
        a reset); left alone, they leave at max age (`Connection: close` on their next
        answer) and reconnect through the activator, which hands them to the other replicas."""
        link = self.link(replica)
        if link is not None:
            await link.quiesce(timeout_s)

    def of(self, replica: Replica) -> tuple[int, int]:
        """(open direct connections, requests in flight on them) of one replica."""
        link = self.link(replica)
        return (0, 0) if link is None else (link.connections, link.in_flight)
