"""The activator's view of one routable replica: where it is, its breaker, its drain state."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from activator.breaker import Breaker
from activator.scaler.backend import StartedReplica

__all__ = ["Replica"]


@dataclass(eq=False)
class Replica:
    """The endpoint's view of one routable replica."""

    info: StartedReplica
    breaker: Breaker
    ready_at: float
    draining: bool = False
    dead: bool = False
    cold_start_t0: float | None = None  # set until the first response of a cold start
    idle: asyncio.Event = field(default_factory=asyncio.Event)  # set when in_flight drops to 0

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def url(self) -> str:
        return self.info.url

    @property
    def in_flight(self) -> int:
        return self.breaker.in_flight

    def can_take(self) -> bool:
        return not (self.draining or self.dead) and self.breaker.has_capacity()
