"""A bounded ring of per-model samples over time, behind the status page's plots.

Every `interval_s` the fleet records one `Sample` per model (replicas ready and running, held
and in-flight requests, replica-seconds so far). The ring keeps the last `capacity` of them in
flat `array('d')` columns, so memory is fixed at start-up: 8 bytes x (1 + 5 x models) x
capacity (1800 samples of 100 models: about 7 MiB). Samples are numbered from 1; `since(seq)`
returns those after `seq`, so a page that polls fetches only what it has not seen. Pure: the
caller passes the time (`GET /thaw/history` uses Unix seconds).
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["FIELDS", "History", "HistorySlice", "Sample"]

FIELDS = ("ready", "running", "held", "in_flight", "replica_seconds")


@dataclass(frozen=True)
class Sample:
    """One model at one time: replicas ready (routable) and running (starting, ready or
    draining), requests held and in flight, replica-seconds used so far."""

    ready: int
    running: int
    held: int
    in_flight: int
    replica_seconds: float


@dataclass(frozen=True)
class HistorySlice:
    """Samples `first_seq`..`last_seq` (oldest first): times `t` and, per model, one list
    per field of FIELDS. Empty when nothing is newer than what was asked for."""

    interval_s: float
    capacity: int
    first_seq: int
    last_seq: int
    t: tuple[float, ...]
    models: Mapping[str, Mapping[str, tuple[float, ...]]]

    def to_json(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval_s,
            "capacity": self.capacity,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "t": list(self.t),
            "models": {
                name: {f: list(values) for f, values in cols.items()}
                for name, cols in self.models.items()
            },
        }


class _Ring:
    """A fixed-size circular column of floats."""

    def __init__(self, capacity: int) -> None:
        self._data = array("d", bytes(8 * capacity))

    def put(self, seq: int, value: float) -> None:
        self._data[(seq - 1) % len(self._data)] = value

    def get(self, seq: int) -> float:
        return self._data[(seq - 1) % len(self._data)]


class History:
    """The last `capacity` samples of `models`, at most one per `interval_s`."""

    def __init__(self, models: Sequence[str], *, capacity: int, interval_s: float) -> None:
        if capacity < 1:
            raise ValueError(f"`capacity` = {capacity}, must be at least 1")
        self._capacity = capacity
        self._interval_s = interval_s
        self._t = _Ring(capacity)
        self._cols = {m: {f: _Ring(capacity) for f in FIELDS} for m in models}
        self._seq = 0  # samples recorded so far (the newest one's number)
        self._last_t: float | None = None

    def add(self, model: str) -> None:
        """Keep samples of `model` too from now on (a model added after the start); its
        earlier samples read as zeros."""
        self._cols.setdefault(model, {f: _Ring(self._capacity) for f in FIELDS})

    @property
    def last_seq(self) -> int:
        return self._seq

    def due(self, now: float) -> bool:
        """Whether a sample taken `now` would be recorded (an interval since the last)."""
        return self._last_t is None or now - self._last_t >= self._interval_s

    def record(self, now: float, samples: Mapping[str, Sample]) -> bool:
        """Add one sample per model taken at `now` when one is due; a model missing from
        `samples` reads as zeros, one the ring was not made for is ignored. True if added."""
        if not self.due(now):
            return False
        self._seq += 1
        self._last_t = now
        self._t.put(self._seq, now)
        for model, cols in self._cols.items():
            sample = samples.get(model)
            for f in FIELDS:
                cols[f].put(self._seq, float(getattr(sample, f)) if sample else 0.0)
        return True

    def since(self, seq: int) -> HistorySlice:
        """The samples numbered after `seq` that the ring still holds (all of them for 0)."""
        first = max(seq + 1, self._seq - self._capacity + 1, 1)
        span = range(first, self._seq + 1)
        return HistorySlice(
            interval_s=self._interval_s,
            capacity=self._capacity,
            first_seq=first if span else self._seq + 1,
            last_seq=self._seq,
            t=tuple(self._t.get(s) for s in span),
            models={
                m: {f: tuple(ring.get(s) for s in span) for f, ring in cols.items()}
                for m, cols in self._cols.items()
            },
        )
