"""Stepped-clock stories of the cost ledger: what scale to zero used vs always-on at the peak."""

from __future__ import annotations

import pytest

from activator.observe.cost import CostLedger, priced
from tests.fakes.clock import FakeClock


class Story:
    """One model's replicas over time: `hold(seconds, running=, ready=)` observes the count
    every tick (0.5 s, as the fleet does) for that long."""

    def __init__(self, *, gpus: int = 0, tick_s: float = 0.5) -> None:
        self.clock = FakeClock(start=100.0)
        self.tick_s = tick_s
        self.ledger = CostLedger("m", gpus_per_replica=gpus, now=self.clock())

    def hold(self, seconds: float, *, running: int, ready: int | None = None) -> None:
        ready = running if ready is None else ready
        self.ledger.observe(self.clock(), running=running, ready=ready)
        for _ in range(round(seconds / self.tick_s)):
            self.clock.advance(self.tick_s)
            self.ledger.observe(self.clock(), running=running, ready=ready)

    def figures(self):  # type: ignore[no-untyped-def]
        return self.ledger.figures(self.clock())


def test_a_model_never_used_costs_nothing_and_saves_nothing() -> None:
    story = Story()
    story.hold(600, running=0)
    c = story.figures()
    assert c.observed_s == pytest.approx(600)
    assert c.replica_seconds == 0 and c.idle_at_zero_s == pytest.approx(600)
    # always-on with min_replicas = its peak (0) would not have run anything either
    assert c.peak_replicas == 0 and c.saved_replica_seconds == 0 and c.saved_fraction is None


def test_one_wake_up_a_minute_of_work_then_back_to_zero() -> None:
    # An hour: idle 20 min, a cold start (2 s starting, not yet ready), 58 s serving, the 30 s
    # idle grace, 1 s draining, then zero for the rest of the hour.
    story = Story()
    story.hold(1200, running=0)
    story.hold(2, running=1, ready=0)
    story.hold(58, running=1)
    story.hold(30, running=1)
    story.hold(1, running=1, ready=0)  # draining
    story.hold(3600 - 1200 - 2 - 58 - 30 - 1, running=0)
    c = story.figures()
    assert c.observed_s == pytest.approx(3600)
    assert c.replica_seconds == pytest.approx(2 + 58 + 30 + 1)
    assert c.idle_at_zero_s == pytest.approx(3600 - 91)
    assert c.peak_replicas == 1
    assert c.always_on_replica_seconds == pytest.approx(3600)  # one replica the whole hour
    assert c.saved_replica_seconds == pytest.approx(3600 - 91)
    assert c.saved_fraction == pytest.approx((3600 - 91) / 3600)


def test_always_on_is_sized_at_the_observed_peak() -> None:
    # A burst needs 3 replicas for 10 s; an always-on deployment would keep 3 all along.
    story = Story()
    story.hold(100, running=1)
    story.hold(10, running=3)
    story.hold(90, running=1)
    c = story.figures()
    assert c.peak_replicas == 3
    assert c.replica_seconds == pytest.approx(100 + 30 + 90)
    assert c.always_on_replica_seconds == pytest.approx(3 * 200)
    assert c.saved_replica_seconds == pytest.approx(600 - 220)


def test_the_peak_counts_ready_replicas_not_starts_that_failed() -> None:
    # A model whose wake-ups never succeed spends replica-seconds starting, while always-on
    # at its peak (0 ready) would spend nothing: the saving is honestly negative.
    story = Story()
    story.hold(20, running=1, ready=0)
    story.hold(40, running=0)
    c = story.figures()
    assert c.peak_replicas == 0
    assert c.replica_seconds == pytest.approx(20)
    assert c.saved_replica_seconds == pytest.approx(-20)


def test_gpu_seconds_are_replica_seconds_times_gpus_held() -> None:
    story = Story(gpus=2)
    story.hold(60, running=0)
    story.hold(30, running=2)
    c = story.figures()
    assert c.gpu_seconds == pytest.approx(2 * 30 * 2)
    assert c.always_on_gpu_seconds == pytest.approx(2 * 90 * 2)
    assert c.saved_gpu_seconds == pytest.approx(2 * 60 * 2)
    assert priced(c.saved_gpu_seconds, 3.6) == pytest.approx(240 / 3600 * 3.6)
    assert priced(c.gpu_seconds, None) is None


def test_figures_between_observations_carry_the_last_count_and_change_nothing() -> None:
    story = Story()
    story.hold(10, running=2)
    story.clock.advance(0.25)  # half a tick: the fleet has not observed yet
    first = story.figures()
    assert first.replica_seconds == pytest.approx(2 * 10.25)
    assert story.figures() == first  # reading does not accrue twice
    story.ledger.observe(story.clock(), running=0, ready=0)
    assert story.figures().replica_seconds == pytest.approx(2 * 10.25)


def test_an_observation_out_of_order_never_counts_time_twice_or_backwards() -> None:
    ledger = CostLedger("m", gpus_per_replica=0, now=0.0)
    ledger.observe(10.0, running=1, ready=1)
    ledger.observe(5.0, running=1, ready=1)  # a stale reading: no negative time
    ledger.observe(20.0, running=0, ready=0)
    assert ledger.figures(20.0).replica_seconds == pytest.approx(10.0)
    assert ledger.figures(20.0).idle_at_zero_s == pytest.approx(10.0)
