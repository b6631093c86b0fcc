"""The density benchmark's trace: seeded, bursty, heavy-tailed; and its GPU projection's
packing."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.density_trace import Arrival, TraceShape, awake_sets, bins_needed, bursty_trace

MODELS = [f"m{i}" for i in range(20)]


def test_the_same_seed_gives_the_same_trace_and_another_seed_another() -> None:
    assert bursty_trace(MODELS, 300, seed=7) == bursty_trace(MODELS, 300, seed=7)
    assert bursty_trace(MODELS, 300, seed=7) != bursty_trace(MODELS, 300, seed=8)


def test_arrivals_are_in_time_order_within_the_duration_each_burst_marked_once() -> None:
    trace = bursty_trace(MODELS, 600, seed=1)
    times = [a.t for a in trace]
    assert times == sorted(times) and times[0] >= 0 and times[-1] < 600
    for model in MODELS:
        mine = [a for a in trace if a.model == model]
        assert not mine or mine[0].first  # a model's first request opens a burst


def test_idle_gaps_are_heavy_tailed_and_models_differ_in_popularity() -> None:
    shape = TraceShape(burst_mean=1.0)  # one request per burst: every gap is an idle gap
    trace = bursty_trace(["m"], 200_000, seed=3, shape=shape)
    gaps = np.diff([a.t for a in trace])
    # Pareto(1.5): the largest gap is far beyond the median (an exponential's would be ~10x).
    assert gaps.max() / np.median(gaps) > 50
    counts = sorted(sum(a.model == m for a in bursty_trace(MODELS, 600, seed=7)) for m in MODELS)
    assert counts[-1] >= 5 * max(1, counts[0])


def test_a_model_is_awake_from_a_request_until_its_grace_passes() -> None:
    trace = [Arrival(0.0, "a", True), Arrival(5.0, "b", True)]
    awake = awake_sets(trace, grace_s=3.0)
    assert awake[0] == {"a"} and awake[3] == {"a"} and awake[4] == set()
    assert awake[5] == {"b"} and awake[8] == {"b"}


@pytest.mark.parametrize(
    ("sizes", "budget", "bins"),
    [([], 10, 0), ([6, 5, 4], 10, 2), ([3, 3, 3], 10, 1), ([12, 1], 10, 2)],
)
def test_first_fit_decreasing_counts_devices(sizes: list[int], budget: int, bins: int) -> None:
    assert bins_needed(sizes, budget) == bins


def test_a_bad_duration_is_refused() -> None:
    with pytest.raises(ValueError, match="duration_s = 0, must be > 0"):
        bursty_trace(MODELS, 0, seed=1)
