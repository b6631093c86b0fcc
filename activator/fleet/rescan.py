"""What changed in the model repository between two reads, and when to read it again: pure.

`thaw up` re-reads a model's directory on an explicit `load` and, with `--model-control-mode
poll`, every model each `--repository-poll-secs` (as tritonserver and `thaw serve` do). A read
gives each model's fingerprint (tritonconfig.fingerprint: its files' paths, mtimes and sizes);
`compare` turns the fingerprints known before and those read now into one `ModelChange` per
model, which the fleet (activator.fleet.fleet) acts on:

    ADDED      a directory that was not there: a new model (at zero), or a refusal
    CHANGED    its files changed: the new entry, and its replicas replaced (drained first)
    REMOVED    its directory is gone: scaled to zero and dropped from the index (poll only)
    UNCHANGED  nothing to do but what the caller asked (a load warms it)

`PollSchedule` says when the next poll is due, from the time it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from tritonconfig.fingerprint import Fingerprint

__all__ = ["Change", "ModelChange", "PollSchedule", "compare", "compare_one"]


class Change(StrEnum):
    """How one model's directory differs from what `thaw up` knew of it."""

    ADDED = "added"
    CHANGED = "changed"
    REMOVED = "removed"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class ModelChange:
    """One model's change between two reads of the repository."""

    name: str
    change: Change


def compare_one(before: Fingerprint | None, after: Fingerprint | None) -> Change:
    """One model: `before` the fingerprint known (None: no such model was known), `after` the
    one read now (None: its directory is gone)."""
    if before is None:
        return Change.UNCHANGED if after is None else Change.ADDED
    if after is None:
        return Change.REMOVED
    return Change.UNCHANGED if before == after else Change.CHANGED


def compare(
    before: Mapping[str, Fingerprint], after: Mapping[str, Fingerprint]
) -> tuple[ModelChange, ...]:
    """Every model known before or read now, by name, with its change."""
    names = sorted(set(before) | set(after))
    return tuple(ModelChange(n, compare_one(before.get(n), after.get(n))) for n in names)


class PollSchedule:
    """When the repository is read again: every `interval_s` seconds (tritonserver's
    `--repository-poll-secs`), counted from the end of the last read, so that a slow read
    never stacks reads up."""

    def __init__(self, interval_s: float, *, now: float) -> None:
        if interval_s <= 0:
            raise ValueError(f"`interval_s` = {interval_s}, must be positive")
        self._interval_s = interval_s
        self._next = now + interval_s

    def due(self, now: float) -> bool:
        """Whether a read should start at `now`."""
        return now >= self._next

    def done(self, now: float) -> None:
        """A read ended at `now`: the next one is an interval later."""
        self._next = now + self._interval_s

    def wait_s(self, now: float) -> float:
        """Seconds from `now` until the next read is due (0 when it is)."""
        return max(0.0, self._next - now)
