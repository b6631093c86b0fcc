"""Replica choice: power of two random choices by fewest in-flight requests."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol, TypeVar

__all__ = ["Routable", "pick"]


class Routable(Protocol):
    """What the balancer needs of a replica."""

    @property
    def in_flight(self) -> int: ...

    def can_take(self) -> bool: ...


R = TypeVar("R", bound=Routable)


def pick(replicas: Sequence[R], rng: random.Random) -> R | None:
    """A replica that can take a request now, or None.

    Two random candidates, the one with fewer in flight wins (Mitzenmacher's power of two
    choices: near-least-loaded without scanning, and no herd on one replica).
    """
    free = [r for r in replicas if r.can_take()]
    if len(free) <= 2:  # (no min(key=...): this runs for every request)
        if not free:
            return None
        first, second = free[0], free[-1]
    else:
        first, second = rng.sample(free, 2)
    return first if first.in_flight <= second.in_flight else second
