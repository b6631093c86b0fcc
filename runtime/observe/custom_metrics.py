"""The custom metrics Python models declare (`pb_utils.MetricFamily`): families, series, values.

Server-wide, as Triton's are: a family is known by its name (created again with the same kind,
it is the same family), a series by its family and labels, so every instance of a model, in
every stub process, adds to the same numbers. Thread-safe (model threads, stub readers and the
scrape all come here); stdlib only, so a stub process can hold a local one for tests. The
exporter (runtime.observe.metrics) reads `snapshot()` at scrape time: a model's `increment` costs
one dict lookup and an addition under a lock, nothing per request beyond the model's own calls.
"""

from __future__ import annotations

import bisect
import math
import threading
from dataclasses import dataclass, field
from enum import IntEnum

__all__ = ["CustomMetrics", "FamilySnapshot", "MetricKind", "SeriesSnapshot"]


class MetricKind(IntEnum):
    """pb_utils.MetricFamily.COUNTER / GAUGE / HISTOGRAM (Triton's values)."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


@dataclass(slots=True)
class _Series:
    labels: tuple[tuple[str, str], ...]
    value: float = 0.0  # counter / gauge value; histogram sum
    buckets: tuple[float, ...] = ()  # histogram upper bounds, ascending (no +Inf)
    counts: list[int] = field(default_factory=list)  # per bucket, not cumulative; last: +Inf
    observations: int = 0


@dataclass(slots=True)
class _Family:
    name: str
    description: str
    kind: MetricKind
    series: dict[tuple[tuple[str, str], ...], int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SeriesSnapshot:
    """One series at scrape time; `cumulative` are the histogram's `le` counts, +Inf last."""

    labels: dict[str, str]
    value: float
    buckets: tuple[float, ...]
    cumulative: tuple[int, ...]
    observations: int


@dataclass(frozen=True, slots=True)
class FamilySnapshot:
    name: str
    description: str
    kind: MetricKind
    series: tuple[SeriesSnapshot, ...]


class CustomMetrics:
    """Every custom family and series of one server; keys are small ints handed to models."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        self._series: list[_Series] = []
        self._series_family: list[_Family] = []

    def family(self, name: str, description: str, kind: int) -> None:
        """Declare a family; again with the same kind is a no-op, another kind a ValueError."""
        if (
            not name
            or not (name[0].isalpha() or name[0] in "_:")
            or not all(c.isalnum() or c in "_:" for c in name)
        ):
            raise ValueError(f"metric family name {name[:80]!r} is not a Prometheus metric name")
        wanted = MetricKind(kind)
        with self._lock:
            existing = self._families.get(name)
            if existing is None:
                self._families[name] = _Family(name, description, wanted)
            elif existing.kind != wanted:
                raise ValueError(
                    f"metric family '{name}' already exists as a {existing.kind.name.lower()}"
                )

    def create(self, family: str, labels: dict[str, str], buckets: list[float] | None) -> int:
        """The key of the series `labels` of `family` (the same key for the same labels)."""
        key_labels = tuple(sorted(labels.items()))
        bounds = tuple(sorted(set(buckets))) if buckets else ()
        if any(math.isnan(b) for b in bounds):
            raise ValueError("histogram buckets must be numbers")
        with self._lock:
            fam = self._families.get(family)
            if fam is None:
                raise ValueError(f"metric family '{family}' does not exist")
            key = fam.series.get(key_labels)
            if key is not None:
                return key
            key = len(self._series)
            series = _Series(key_labels, buckets=bounds)
            if fam.kind == MetricKind.HISTOGRAM:
                series.counts = [0] * (len(bounds) + 1)
            self._series.append(series)
            self._series_family.append(fam)
            fam.series[key_labels] = key
            return key

    def update(self, key: int, op: str, value: float) -> None:
        """`increment`, `set` or `observe` one series; a ValueError says why not."""
        series, kind = self._lookup(key)
        if math.isnan(value):
            raise ValueError("value is not a number")
        with self._lock:
            if op == "increment" and kind != MetricKind.HISTOGRAM:
                if kind == MetricKind.COUNTER and value < 0:
                    raise ValueError("a counter cannot be incremented by a negative value")
                series.value += value
            elif op == "set" and kind == MetricKind.GAUGE:
                series.value = value
            elif op == "observe" and kind == MetricKind.HISTOGRAM:
                series.counts[bisect.bisect_left(series.buckets, value)] += 1
                series.value += value
                series.observations += 1
            else:
                raise ValueError(f"'{op}' is not supported for a {kind.name.lower()}")

    def value(self, key: int) -> float:
        """A counter's or gauge's value (Triton has none for a histogram)."""
        series, kind = self._lookup(key)
        if kind == MetricKind.HISTOGRAM:
            raise ValueError("a histogram has no single value")
        with self._lock:
            return series.value

    def snapshot(self) -> list[FamilySnapshot]:
        """Every family with its series, consistent at one instant (for the exporter)."""
        with self._lock:
            families = []
            for fam in self._families.values():
                rows = []
                for key in fam.series.values():
                    s = self._series[key]
                    running, cumulative = 0, []
                    for count in s.counts:
                        running += count
                        cumulative.append(running)
                    rows.append(
                        SeriesSnapshot(
                            dict(s.labels), s.value, s.buckets, tuple(cumulative), s.observations
                        )
                    )
                families.append(FamilySnapshot(fam.name, fam.description, fam.kind, tuple(rows)))
            return families

    def _lookup(self, key: int) -> tuple[_Series, MetricKind]:
        if not isinstance(key, int) or not 0 <= key < len(self._series):
            raise ValueError(f"no such metric {key!r}")
        return self._series[key], self._series_family[key].kind
