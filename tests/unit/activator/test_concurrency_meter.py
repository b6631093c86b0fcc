"""Time-weighted concurrency sampling."""

from __future__ import annotations

from activator.concurrency import ConcurrencyMeter


def test_mean_is_time_weighted() -> None:
    meter = ConcurrencyMeter(0.0)
    meter.change(0.0, +1)
    meter.change(0.5, +1)  # two in flight for the second half
    mean, peak = meter.sample(1.0)
    assert abs(mean - 1.5) < 1e-9
    assert peak == 2


def test_short_request_between_ticks_still_counts() -> None:
    meter = ConcurrencyMeter(0.0)
    meter.change(0.2, +1)
    meter.change(0.3, -1)
    mean, peak = meter.sample(1.0)
    assert 0.09 < mean < 0.11
    assert peak == 1
    assert meter.sample(2.0) == (0.0, 0)


def test_never_negative() -> None:
    meter = ConcurrencyMeter(0.0)
    meter.change(1.0, -1)
    assert meter.current == 0
