"""When a model's execute may run on the event loop instead of its worker thread.

Handing a request to a worker thread and back costs two thread wake-ups and two GIL hand-offs.
For a tiny pure-Python model (microseconds of work that holds the GIL anyway) that hand-off is
most of the request's server time, and on a busy machine a woken worker can wait milliseconds
for the GIL. So a GIL-bound model that has *proven* tiny runs inline; everything else keeps its
thread, and the event loop is never lent to a model that has not earned it:

    observe(thread run) → after `streak` consecutive runs under `max_inline_ns` → inline
    observe(inline run over `max_inline_ns`) → back to the thread, proving starts again
    observe(inline run over `ban_ns`) → never inline again (this model can block the loop)

The worst a model that turns slow can do is hold the loop for one execution; a model that does
that for longer than `ban_ns` never gets another chance. Pure: durations are passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["InlinePolicy"]


@dataclass(slots=True)
class InlinePolicy:
    """The decision for one model version; `max_inline_ns == 0` disables inline runs."""

    max_inline_ns: int
    streak: int = 64  # consecutive fast thread runs needed before running inline
    ban_ns: int = 10_000_000  # an inline run this slow bans inline runs for good
    _fast_runs: int = 0
    _banned: bool = False

    @property
    def inline(self) -> bool:
        """Whether the next execution may run on the event loop."""
        return not self._banned and self.max_inline_ns > 0 and self._fast_runs >= self.streak

    def observe(self, duration_ns: int, *, ran_inline: bool) -> None:
        """Record one execution's duration (wall clock, nanoseconds)."""
        if duration_ns <= self.max_inline_ns:
            self._fast_runs += 1
            return
        self._fast_runs = 0
        if ran_inline and duration_ns > self.ban_ns:
            self._banned = True
