"""What one activator knows of the others' concurrency: pure bookkeeping, time passed in.

Followers report each model's concurrency (mean since their last tick, held + in flight now)
to the scaling leader, which keeps the latest report of each (`PeerTable`) and answers with the
totals over every activator; a follower keeps the last answer (`LeaderTotals`). Either way a
number older than `ttl_s` no longer counts: a dead activator's load fades out on its own, and a
follower that lost its leader scales on its own load alone until it reaches the next one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from activator.scaler.backend import PeerLoad

__all__ = ["LeaderTotals", "ModelLoad", "PeerTable"]

ModelLoad = Mapping[str, PeerLoad]  # model -> its concurrency on one activator (or the total)


@dataclass(frozen=True)
class _Report:
    at: float
    models: ModelLoad


class PeerTable:
    """The leader's view: the latest report of every other activator."""

    def __init__(self, ttl_s: float) -> None:
        self._ttl_s = ttl_s
        self._reports: dict[str, _Report] = {}

    def update(self, activator: str, models: ModelLoad, now: float) -> list[str]:
        """Store `activator`'s report; return the models whose demand elsewhere just appeared
        (the others held or ran nothing of it before this report, and now do)."""
        before = {m: self.others(m, now).current for m in models}
        self._reports[activator] = _Report(now, dict(models))
        return [m for m, load in models.items() if load.current > 0 and before[m] == 0]

    def others(self, model: str, now: float, *, exclude: str | None = None) -> PeerLoad:
        """`model`'s concurrency summed over the live reports (but `exclude`'s)."""
        mean, current = 0.0, 0
        for activator, report in self._live(now):
            load = report.models.get(model)
            if load is not None and activator != exclude:
                mean += load.mean
                current += load.current
        return PeerLoad(mean, current)

    def forget(self, model: str) -> None:
        """Drop `model` from every stored report (each activator's next report has it again)."""
        for activator, report in list(self._reports.items()):
            if model in report.models:
                kept = {m: load for m, load in report.models.items() if m != model}
                self._reports[activator] = _Report(report.at, kept)

    def live_peers(self, now: float) -> int:
        """Other activators whose last report still counts."""
        return sum(1 for _ in self._live(now))

    def _live(self, now: float) -> list[tuple[str, _Report]]:
        for activator in [a for a, r in self._reports.items() if now - r.at > self._ttl_s]:
            del self._reports[activator]
        return list(self._reports.items())


class LeaderTotals:
    """A follower's view: the totals the leader last answered, and what it had reported."""

    def __init__(self, ttl_s: float) -> None:
        self._ttl_s = ttl_s
        self._at: float | None = None
        self._totals: ModelLoad = {}
        self._reported: ModelLoad = {}

    def accept(self, totals: ModelLoad, reported: ModelLoad, now: float) -> None:
        """The leader answered `totals` to a report of `reported` (this activator's own)."""
        self._at, self._totals, self._reported = now, dict(totals), dict(reported)

    def others(self, model: str, now: float) -> PeerLoad:
        """The total less this activator's own part of it; nothing once stale."""
        if self._at is None or now - self._at > self._ttl_s:
            return PeerLoad()
        total = self._totals.get(model, PeerLoad())
        own = self._reported.get(model, PeerLoad())
        return PeerLoad(max(0.0, total.mean - own.mean), max(0, total.current - own.current))

    def forget(self) -> None:
        self._at = None
