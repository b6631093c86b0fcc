"""When a model's execute may run on the event loop instead of its worker thread.

Handing a request to a worker thread and back costs two thread wake-ups and two GIL hand-offs.
For a tiny pure-Python model (microseconds of work that holds the GIL anyway) that hand-off is
most of the request's server time, and on a busy machine a woken worker can wait milliseconds
for the GIL. So a GIL-bound model that has *proven* tiny runs inline; everything else keeps its
thread, and the event loop is never lent to a model that has not earned it:

    observe(every run) → slow_rate: moving share of runs slower than `max_inline_ns`
    inline ⇔ at least `warmup_runs` runs seen, slow_rate < `max_slow_rate`, fewer than
             `strikes` strikes
    an inline run slower than `ban_ns` → a strike, and back to the thread (slow_rate = 1)
    `forgive_runs` runs without a strike → one strike forgiven

A single outlier (the process preempted mid-run on a busy machine) does not cost the fast path,
but a model that turns slow is back in its thread within a few runs, and a model that holds the
loop for `ban_ns` `strikes` times within about `forgive_runs` runs is never run inline again
(forgiving keeps rare preemptions on a busy machine from adding up to a ban over hours). Pure:
the caller passes each run's wall-clock duration.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["InlinePolicy"]


@dataclass(slots=True)
class InlinePolicy:
    """The decision for one model version; `max_inline_ns == 0` disables inline runs."""

    max_inline_ns: int
    warmup_runs: int = 64  # runs (in the worker thread) before any may run inline
    max_slow_rate: float = 0.1
    smoothing: float = 1 / 32  # weight of the newest run in slow_rate
    ban_ns: int = 10_000_000
    strikes: int = 3
    forgive_runs: int = 100_000
    _runs: int = 0
    _slow_rate: float = 0.0
    _strikes: int = 0
    _last_strike_run: int = 0

    @property
    def inline(self) -> bool:
        """Whether the next execution may run on the event loop."""
        return (
            self._runs >= self.warmup_runs
            and self._slow_rate < self.max_slow_rate
            and self._strikes < self.strikes
            and self.max_inline_ns > 0
        )

    def observe(self, duration_ns: int, *, ran_inline: bool) -> None:
        """Record one execution's wall-clock duration in nanoseconds."""
        self._runs += 1
        slow = 1.0 if duration_ns > self.max_inline_ns else 0.0
        self._slow_rate += self.smoothing * (slow - self._slow_rate)
        if ran_inline and duration_ns > self.ban_ns:
            self._strikes += 1
            self._last_strike_run = self._runs
            self._slow_rate = 1.0
        elif 0 < self._strikes < self.strikes and (
            self._runs - self._last_strike_run >= self.forgive_runs
        ):
            self._strikes -= 1
            self._last_strike_run = self._runs
