"""Triton's latency summaries: quantiles of a sliding window, count and sum since the load."""

from __future__ import annotations

import math

from runtime.observe.latency_summary import LatencyKind, LatencySummaries, SlidingQuantiles

_Q = ((0.5, 0.05), (0.9, 0.01))


def test_quantiles_of_the_recent_observations_count_and_sum_of_all() -> None:
    window = SlidingQuantiles(max_age_s=60.0)
    for i, value in enumerate([10.0, 20.0, 30.0, 40.0, 1000.0]):
        window.observe(value, now_s=float(i))
    snap = window.snapshot(_Q, now_s=5.0)
    assert snap.values == ((0.5, 30.0), (0.9, 1000.0))
    assert (snap.count, snap.total) == (5, 1100.0)


def test_observations_older_than_the_window_leave_the_quantiles_not_the_count() -> None:
    window = SlidingQuantiles(max_age_s=60.0)
    window.observe(5000.0, now_s=0.0)  # a slow request at start-up
    window.observe(10.0, now_s=61.0)
    snap = window.snapshot(_Q, now_s=61.5)
    assert snap.values == ((0.5, 10.0), (0.9, 10.0))
    assert snap.count == 2


def test_an_idle_window_reads_nan_as_prometheus_cpp() -> None:
    window = SlidingQuantiles(max_age_s=1.0)
    window.observe(10.0, now_s=0.0)
    assert all(math.isnan(v) for _, v in window.snapshot(_Q, now_s=5.0).values)


def test_a_summary_never_observed_reads_nan_and_zero() -> None:
    snap = LatencySummaries().snapshot(LatencyKind.QUEUE, _Q, now_s=0.0)
    assert all(math.isnan(v) for _, v in snap.values)
    assert (snap.count, snap.total) == (0, 0.0)
