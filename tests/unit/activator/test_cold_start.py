"""The cold-start rule (pure) and the timing of one cold start on a stepped clock."""

from __future__ import annotations

import pytest

from activator.endpoint.breaker import Breaker
from activator.endpoint.cold_start import KEEP_RECENT, ColdStartTimer, replicas_to_start
from activator.endpoint.replica import Replica
from activator.observe.metrics import Metrics
from activator.scaler.backend import ReplicaHandle
from tests.fakes.clock import FakeClock


@pytest.mark.parametrize(
    ("desired", "ready", "starting", "min_replicas", "starts"),
    [
        (4, 0, 0, 0, 1),  # a burst at zero that "needs" 4: exactly one start
        (4, 0, 1, 0, 0),  # ... and none more while it is starting
        (1, 0, 0, 0, 1),
        (3, 0, 0, 3, 3),  # min_replicas above one start together
        (3, 0, 1, 2, 1),  # ... up to min_replicas
        (4, 1, 0, 0, 3),  # once one is ready the autoscaler's count is started
        (4, 1, 2, 0, 1),
        (1, 2, 0, 0, 0),  # surplus is not this rule's business
        (0, 0, 0, 0, 0),
    ],
)
def test_replicas_to_start(
    desired: int, ready: int, starting: int, min_replicas: int, starts: int
) -> None:
    count = replicas_to_start(
        desired=desired, ready=ready, starting=starting, min_replicas=min_replicas
    )
    assert count == starts


def _replica(clock: FakeClock) -> Replica:
    handle = ReplicaHandle("m-1", "m", "http://fake", claim_s=0.05, restore_s=0.2)
    return Replica(handle, Breaker(0), ready_at=clock())


def _count(metrics: Metrics, phase: str) -> float:
    value = metrics.registry.get_sample_value(
        "thaw_cold_start_seconds_count", {"model": "m", "phase": phase}
    )
    return value or 0.0


def test_a_cold_start_is_timed_from_its_start_to_its_first_response() -> None:
    clock, metrics = FakeClock(), Metrics()
    timer = ColdStartTimer("m", metrics, clock)
    timer.begin(requests_waiting=True)
    clock.advance(0.3)
    first, second = _replica(clock), _replica(clock)
    timer.replica_up(first)
    timer.replica_up(second)  # only the first replica of a cold start carries it
    assert (first.cold_start_t0, second.cold_start_t0) == (1000.0, None)
    assert (_count(metrics, "claim"), _count(metrics, "restore")) == (1, 1)
    clock.advance(0.1)
    timer.served(first)
    assert timer.last_s == pytest.approx(0.4)
    assert first.cold_start_t0 is None
    assert (_count(metrics, "warmup"), _count(metrics, "total")) == (1, 1)
    timer.served(first)  # later responses are not cold starts
    assert _count(metrics, "total") == 1


def test_starts_nobody_waits_for_and_failed_ones_are_not_timed() -> None:
    clock, metrics = FakeClock(), Metrics()
    timer = ColdStartTimer("m", metrics, clock)
    timer.begin(requests_waiting=False)  # min_replicas, or the autoscaler alone
    replica = _replica(clock)
    timer.replica_up(replica)
    assert replica.cold_start_t0 is None
    timer.begin(requests_waiting=True)
    timer.abandon()  # every start failed
    timer.replica_up(replica)
    assert replica.cold_start_t0 is None
    assert timer.last_s is None and _count(metrics, "claim") == 0


def test_the_last_cold_starts_are_kept_with_their_phases_and_failures() -> None:
    clock, metrics = FakeClock(), Metrics()
    wall = FakeClock(start=1_700_000_000.0)
    timer = ColdStartTimer("m", metrics, clock, wall=wall)
    timer.begin(requests_waiting=True)
    clock.advance(0.3)
    replica = _replica(clock)
    timer.replica_up(replica)
    clock.advance(0.1)
    wall.advance(0.4)
    timer.served(replica)
    (report,) = timer.recent
    assert report.model == "m" and report.error is None
    assert report.began_unix == pytest.approx(1_700_000_000.0)
    assert report.total_s == pytest.approx(0.4)
    assert report.warmup_s == pytest.approx(0.1)
    assert (report.claim_s, report.restore_s) == (replica.handle.claim_s, replica.handle.restore_s)
    timer.begin(requests_waiting=True)
    clock.advance(2.0)
    wall.advance(2.0)
    timer.abandon("model 'm' could not be activated: boom")
    failed = timer.recent[-1]
    assert failed.total_s is None and failed.claim_s is None
    assert failed.error == "model 'm' could not be activated: boom"
    assert failed.began_unix == pytest.approx(1_700_000_000.4)
    timer.abandon("nothing in progress: not a cold start")
    assert len(timer.recent) == 2


def test_only_the_last_few_cold_starts_are_kept() -> None:
    clock, metrics = FakeClock(), Metrics()
    timer = ColdStartTimer("m", metrics, clock)
    for _ in range(KEEP_RECENT + 5):
        timer.begin(requests_waiting=True)
        timer.abandon("boom")
    assert len(timer.recent) == KEEP_RECENT


def test_a_models_warm_up_is_a_phase_of_its_own_outside_restore() -> None:
    clock, metrics = FakeClock(), Metrics()
    timer = ColdStartTimer("m", metrics, clock)
    timer.begin(requests_waiting=True)
    handle = ReplicaHandle("m-1", "m", "http://fake", claim_s=0.05, restore_s=1.2, warmup_s=1.0)
    timer.replica_up(Replica(handle, Breaker(0), ready_at=clock()))
    sample = metrics.registry.get_sample_value
    labels = {"model": "m"}
    assert sample("thaw_cold_start_seconds_sum", {**labels, "phase": "model_warmup"}) == 1.0
    assert sample("thaw_cold_start_seconds_sum", {**labels, "phase": "restore"}) == pytest.approx(
        0.2
    )
    assert _count(metrics, "model_warmup") == 1
    # A model without warm-up samples reports no such phase.
    timer.begin(requests_waiting=True)
    timer.replica_up(_replica(clock))
    assert _count(metrics, "model_warmup") == 1


def test_time_to_first_token_keeps_the_last_cold_and_warm_ones_and_counts_each() -> None:
    clock, metrics = FakeClock(), Metrics()
    timer = ColdStartTimer("m", metrics, clock)
    assert (timer.first_token_cold_s, timer.first_token_warm_s) == (None, None)
    timer.first_token(2.5, cold=True)
    timer.first_token(0.04, cold=False)
    timer.first_token(0.03, cold=False)
    assert (timer.first_token_cold_s, timer.first_token_warm_s) == (2.5, 0.03)
    counts = [
        metrics.registry.get_sample_value(
            "thaw_time_to_first_token_seconds_count", {"model": "m", "cold": cold}
        )
        for cold in ("true", "false")
    ]
    assert counts == [1, 2]
