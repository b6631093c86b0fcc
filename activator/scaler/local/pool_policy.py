"""How many idle warm-pool processes to keep: a pure, clock-injected policy that returns Decisions.

The stages of one decision read `demand -> memory -> bounds -> surplus`: demand is the number
of distinct models that woke (a replica start was asked for) within the last `window_s`, so
a burst of N models waking together leaves N idle processes ready for the next burst; the
wanted count is at least `min_idle`; the memory budget caps it at what fits beside what the
pool already costs (`budget_bytes` less the fork server's own memory, divided by the cost of
one idle process: the median PSS measured of the idle ones, or `default_process_bytes`
before any was measured); `max_idle` caps it last. Idle processes above the result are
surplus (stopped), once the window that asked for them has passed; a process still starting
never makes a ready one surplus (the pool counts it when it starts more). Time is an argument
(seconds of a monotonic clock), so tests tell stories with a stepped clock.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from activator.scaler.local_config import PoolSettings

__all__ = ["Limit", "PoolDecision", "PoolPolicy"]


class Limit(StrEnum):
    """What set the target: a label for logs and `thaw status`."""

    MINIMUM = "minimum"  # min_idle
    DEMAND = "demand"  # models woken within the window
    MEMORY = "memory"  # the budget
    MAXIMUM = "maximum"  # max_idle


@dataclass(frozen=True)
class PoolDecision:
    """Keep `target` idle processes (`surplus` of today's idle ones are to go); `demand`
    models woke within the window; one idle process counts `process_bytes`."""

    target: int
    demand: int
    surplus: int
    process_bytes: int
    limit: Limit


class PoolPolicy:
    """Remembers recent wakes; `decide` turns them and what the pool measures into a target."""

    def __init__(self, settings: PoolSettings) -> None:
        self.settings = settings
        self._wakes: deque[tuple[float, str]] = deque()

    def note_wake(self, now: float, model: str) -> None:
        """`model` asked for a replica at `now`."""
        self._wakes.append((now, model))
        self._forget(now)

    def demand(self, now: float) -> int:
        """Distinct models that woke within the window ending at `now`."""
        self._forget(now)
        return len({model for _, model in self._wakes})

    def decide(
        self,
        now: float,
        *,
        idle: int,
        idle_pss: Sequence[int] = (),
        server_bytes: int = 0,
    ) -> PoolDecision:
        """The target given `idle` ready processes, the PSS measured of the idle ones (bytes
        each) and of the fork server (`server_bytes`)."""
        s = self.settings
        demand = self.demand(now)
        wanted, limit = (
            (demand, Limit.DEMAND) if demand > s.min_idle else (s.min_idle, Limit.MINIMUM)
        )
        process_bytes = int(statistics.median(idle_pss)) if idle_pss else s.default_process_bytes
        fits = max(0, s.budget_bytes - server_bytes) // max(1, process_bytes)
        if wanted > fits:
            wanted, limit = fits, Limit.MEMORY
        if wanted > s.max_idle:
            wanted, limit = s.max_idle, Limit.MAXIMUM
        # Only ready processes above the target are surplus: one still starting may fail, and
        # stopping a ready one for it would trade a process in hand for one in the bush.
        surplus = max(0, idle - wanted)
        return PoolDecision(wanted, demand, surplus, process_bytes, limit)

    def _forget(self, now: float) -> None:
        while self._wakes and self._wakes[0][0] <= now - self.settings.window_s:
            self._wakes.popleft()
