"""Time-weighted concurrency sampling."""

from __future__ import annotations

from activator.endpoint.concurrency import ConcurrencyMeter


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


def test_a_cold_start_backlog_is_not_load_while_it_drains() -> None:
    meter = ConcurrencyMeter(0.0)
    for _ in range(50):
        meter.change(0.1, +1)  # held at zero
    meter.restart(1.0, backlog_s=6.0)  # first replica ready
    meter.change(1.05, +1)  # a new request after ready: counted
    mean, peak = meter.sample(1.1)
    assert abs(mean - 0.5) < 1e-9 and peak == 1
    for _ in range(20):
        meter.change(1.2, -1)  # the oldest leave first: all of them backlog
    mean, peak = meter.sample(1.5)
    assert abs(mean - 1.0) < 1e-9 and peak == 1
    assert meter.current == 31


def test_a_backlog_that_outlives_its_window_counts_again() -> None:
    meter = ConcurrencyMeter(0.0)
    for _ in range(40):
        meter.change(0.0, +1)
    meter.restart(1.0, backlog_s=2.0)
    assert meter.sample(2.0) == (0.0, 0)
    mean, peak = meter.sample(4.0)  # still queued after 2 s: real load from t = 3
    assert abs(mean - 20.0) < 1e-9 and peak == 40
    # ... and keeps counting as what it is, sample after sample: 40 in flight, not more.
    for second in range(5, 30):
        mean, peak = meter.sample(float(second))
        assert abs(mean - 40.0) < 1e-9 and peak == 40, second


def test_one_slow_request_after_a_cold_start_is_one_request_however_long() -> None:
    # The request that woke the model runs for 25 s (ticks every 0.5 s): its backlog window
    # ends while it runs, and from then on it is one request in flight. (It once grew by one
    # per second, since the window's end was counted again at every tick: a single slow
    # request scaled its model to max_replicas.)
    meter = ConcurrencyMeter(0.0)
    meter.change(0.0, +1)
    meter.restart(1.0, backlog_s=6.0)
    means = [meter.sample(1.0 + tick / 2)[0] for tick in range(1, 50)]
    assert all(mean <= 1.0 + 1e-9 for mean in means), means
    assert abs(means[-1] - 1.0) < 1e-9
    meter.change(25.75, -1)  # it ends halfway to the next tick
    assert meter.sample(26.0) == (0.5, 1)
    assert meter.sample(26.5) == (0.0, 0)
