"""The activator's view of one routable replica: where it is, its breaker, its drain state."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from activator.endpoint.breaker import Breaker
from activator.scaler.backend import ReplicaHandle

__all__ = ["Replica"]


@dataclass(eq=False)
class Replica:
    """The endpoint's view of one routable replica (its state is set by ReplicaSet only)."""

    handle: ReplicaHandle
    breaker: Breaker
    ready_at: float
    draining: bool = False
    dead: bool = False
    cold_start_t0: float | None = None  # set until the first response of a cold start
    idle: asyncio.Event = field(default_factory=asyncio.Event)  # set when in_flight drops to 0

    @property
    def id(self) -> str:
        return self.handle.id

    @property
    def url(self) -> str:
        return self.handle.url

    @property
    def in_flight(self) -> int:
        return self.breaker.in_flight

    @property
    def routable(self) -> bool:
        """Neither draining nor dead: counts as ready and may be given new requests."""
        return not (self.draining or self.dead)

    def can_take(self) -> bool:
        return self.routable and self.breaker.has_capacity()
