"""A seeded bursty many-model trace, shaped like production serverless traffic (pure, no I/O).

The shape follows what Shahrad et al. measured on Azure Functions ("Serverless in the Wild",
USENIX ATC 2020, figures 5-7): invocation rates of different functions span several orders of
magnitude (most are invoked rarely: 45% of applications less than once an hour, a few very
often), and arrivals are bursty, with inter-arrival times far more variable than Poisson. This
trace is synthetic, not their data; per model:

- a popularity: its idle-gap scale `x_m` is `gap_min_s * 10**u`, `u ~ Uniform(0, spread)` —
  with the default spread of 1.5 decades the most idle model's gaps are ~30x the busiest's;
- idle gaps between bursts from a Pareto (Lomax + x_m) distribution with shape `alpha` (1.5 by
  default: a finite mean, infinite variance — the heavy tail: most gaps short, a few very long);
- bursts of `1 + Geometric` requests (mean `burst_mean`), `Exponential(within_burst_s)` apart.

The first request of every burst is marked: it is the one that finds a model cold (at zero
replicas, or evicted) when the gap before it outlasted the idle grace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Arrival", "TraceShape", "awake_sets", "bins_needed", "bursty_trace"]


@dataclass(frozen=True)
class TraceShape:
    """The distribution's parameters (see the module docstring); times in seconds."""

    gap_min_s: float = 8.0
    spread_decades: float = 1.5
    alpha: float = 1.5
    burst_mean: float = 4.0
    within_burst_s: float = 0.05


@dataclass(frozen=True)
class Arrival:
    """One request: when (seconds after the trace starts), for which model, and whether it
    is the first of its burst."""

    t: float
    model: str
    first: bool


def bursty_trace(
    models: Sequence[str], duration_s: float, seed: int, shape: TraceShape = TraceShape()
) -> list[Arrival]:
    """Every model's bursts over `duration_s`, merged in time order; the same for a seed."""
    if duration_s <= 0:
        raise ValueError(f"duration_s = {duration_s}, must be > 0")
    rng = np.random.default_rng(seed)
    arrivals: list[Arrival] = []
    for model in models:
        scale = shape.gap_min_s * 10 ** rng.uniform(0, shape.spread_decades)
        t = rng.uniform(0, scale)  # the first burst: somewhere within one typical gap
        while t < duration_s:
            size = int(rng.geometric(1 / shape.burst_mean))
            at = t
            for i in range(size):
                if at >= duration_s:
                    break
                arrivals.append(Arrival(round(at, 4), model, first=i == 0))
                at += rng.exponential(shape.within_burst_s)
            t = at + (rng.pareto(shape.alpha) + 1) * scale
    return sorted(arrivals, key=lambda a: (a.t, a.model))


def awake_sets(trace: Sequence[Arrival], grace_s: float, step_s: float = 1.0) -> list[set[str]]:
    """The models awake at every `step_s` of the trace: a model is awake from a request
    until `grace_s` after its last one (its scale-to-zero grace; service time ignored)."""
    if not trace:
        return []
    end = trace[-1].t + grace_s
    times = np.arange(0.0, end + step_s, step_s)
    awake: list[set[str]] = [set() for _ in times]
    for arrival in trace:
        first = int(np.ceil(arrival.t / step_s))
        last = int(np.floor((arrival.t + grace_s) / step_s))
        for i in range(first, min(last, len(times) - 1) + 1):
            awake[i].add(arrival.model)
    return awake


def bins_needed(sizes: Sequence[int], budget: int) -> int:
    """Devices of `budget` bytes first-fit-decreasing needs for `sizes` (one device per item
    larger than the budget: such a model cannot share)."""
    free: list[int] = []
    for size in sorted(sizes, reverse=True):
        for i, room in enumerate(free):
            if room >= size:
                free[i] -= size
                break
        else:
            free.append(max(0, budget - size))
    return len(free)
