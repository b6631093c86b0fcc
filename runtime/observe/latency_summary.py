"""Triton's latency summaries (`--metrics-config summary_latencies=true`): per model version, the
quantiles of its recent request, queue and compute durations, with their count and sum.

    window = SlidingQuantiles()
    window.observe(1250.0, now_s=t)                       one duration, in microseconds
    window.snapshot(((0.5, 0.05), (0.9, 0.01)), now_s=t)  -> SummarySnapshot(values, count, total)

As prometheus-cpp's Summary (Triton's), which Triton builds with its default 60 s window: a
quantile is of the observations of the last `max_age_s` (NaN when there are none), the count
and the sum are of every observation since the load. The quantile is exact (nearest rank) over
at most `max_samples` observations, the newest: a version answering more than that in a window
has its quantiles read from the newest ones, where prometheus-cpp's CKMS keeps an estimate
within each quantile's allowed error instead.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["LatencyKind", "LatencySummaries", "SlidingQuantiles", "SummarySnapshot"]


class LatencyKind(StrEnum):
    """The durations a version's summaries observe; values are the summaries' names."""

    REQUEST = "nv_inference_request_summary_us"
    QUEUE = "nv_inference_queue_summary_us"
    COMPUTE_INPUT = "nv_inference_compute_input_summary_us"
    COMPUTE_INFER = "nv_inference_compute_infer_summary_us"
    COMPUTE_OUTPUT = "nv_inference_compute_output_summary_us"
    CACHE_HIT = "nv_cache_hit_summary_per_model"
    CACHE_MISS = "nv_cache_miss_summary_per_model"


@dataclass(frozen=True)
class SummarySnapshot:
    """One summary at a scrape: (quantile, value) pairs, the count and the sum of every
    observation."""

    values: tuple[tuple[float, float], ...]
    count: int
    total: float


class SlidingQuantiles:
    """The observations of one summary: recent ones for its quantiles, all for count and sum.
    Not thread-safe: its owner (runtime.observe.stats.ModelStats) holds its lock around it."""

    def __init__(self, *, max_age_s: float = 60.0, max_samples: int = 4096) -> None:
        self._max_age_s = max_age_s
        self._recent: deque[tuple[float, float]] = deque(maxlen=max_samples)  # (at, value)
        self.count = 0
        self.total = 0.0

    def observe(self, value: float, *, now_s: float) -> None:
        self._recent.append((now_s, value))
        self.count += 1
        self.total += value

    def snapshot(
        self, quantiles: tuple[tuple[float, float], ...], *, now_s: float
    ) -> SummarySnapshot:
        while self._recent and self._recent[0][0] < now_s - self._max_age_s:
            self._recent.popleft()
        ordered = sorted(value for _, value in self._recent)
        return SummarySnapshot(
            tuple((q, _nearest_rank(ordered, q)) for q, _ in quantiles), self.count, self.total
        )


def _nearest_rank(ordered: list[float], quantile: float) -> float:
    if not ordered:
        return math.nan
    rank = math.ceil(quantile * len(ordered))
    return ordered[min(max(rank, 1), len(ordered)) - 1]


class LatencySummaries:
    """One model version's summaries, each made at its first observation."""

    def __init__(self) -> None:
        self._windows: dict[LatencyKind, SlidingQuantiles] = {}

    def observe(self, kind: LatencyKind, value_us: float, *, now_s: float) -> None:
        window = self._windows.get(kind)
        if window is None:
            window = self._windows[kind] = SlidingQuantiles()
        window.observe(value_us, now_s=now_s)

    def snapshot(
        self, kind: LatencyKind, quantiles: tuple[tuple[float, float], ...], *, now_s: float
    ) -> SummarySnapshot:
        """The summary of `kind`; no observation yet: NaN quantiles, count and sum 0 (as a
        prometheus-cpp summary made at load reads before its first request)."""
        window = self._windows.get(kind)
        if window is None:
            return SummarySnapshot(tuple((q, math.nan) for q, _ in quantiles), 0, 0.0)
        return window.snapshot(quantiles, now_s=now_s)
