"""Stepped-clock stories of the warm pool's sizing policy (no sleeping, no processes)."""

from __future__ import annotations

from activator.scaler.local.pool_policy import Limit, PoolPolicy
from activator.scaler.local_config import PoolSettings

MiB = 1 << 20
BASE = PoolSettings(
    min_idle=1,
    max_idle=8,
    window_s=60,
    budget_bytes=1024 * MiB,
    default_process_bytes=100 * MiB,
)


def test_an_unused_pool_keeps_its_minimum() -> None:
    policy = PoolPolicy(BASE)
    decision = policy.decide(0.0, idle=0)
    assert (decision.target, decision.limit, decision.surplus) == (1, Limit.MINIMUM, 0)


def test_a_burst_of_models_asks_for_one_idle_process_each_until_the_window_passes() -> None:
    policy = PoolPolicy(BASE)
    for i, model in enumerate(["a", "b", "c", "a"]):  # "a" twice: still one model
        policy.note_wake(100.0 + i * 0.01, model)
    now = 100.1
    decision = policy.decide(now, idle=0)
    assert (decision.target, decision.demand, decision.limit) == (3, 3, Limit.DEMAND)
    # The pool filled up; 59 s later the burst still counts, so nothing is surplus.
    held = policy.decide(now + 59, idle=3)
    assert held.target == 3 and held.surplus == 0
    # Once the window has passed without wakes, back to the minimum: two idle are surplus.
    after = policy.decide(now + 61, idle=3)
    assert (after.target, after.surplus, after.limit) == (1, 2, Limit.MINIMUM)


def test_a_model_waking_again_keeps_its_process_asked_for() -> None:
    policy = PoolPolicy(BASE)
    policy.note_wake(0.0, "a")
    policy.note_wake(0.0, "b")
    policy.note_wake(50.0, "b")
    assert policy.decide(70.0, idle=2).target == 1  # "a" is older than 60 s
    assert policy.decide(70.0, idle=2).surplus == 1


def test_the_memory_budget_caps_the_pool_using_measured_pss() -> None:
    policy = PoolPolicy(BASE)
    for i in range(10):
        policy.note_wake(0.0, f"m{i}")
    # Before any measurement: 100 MiB each, so 10 fit in 1024 MiB.
    assert policy.decide(1.0, idle=0).target == 8  # max_idle caps first
    # Measured 200 MiB each and a 224 MiB fork server: (1024 - 224) / 200 = 4 fit.
    capped = policy.decide(1.0, idle=2, idle_pss=[200 * MiB, 200 * MiB],
                           server_bytes=224 * MiB)  # fmt: skip
    assert (capped.target, capped.limit, capped.process_bytes) == (4, Limit.MEMORY, 200 * MiB)


def test_a_budget_too_small_for_one_process_keeps_none_idle() -> None:
    policy = PoolPolicy(
        PoolSettings(min_idle=1, budget_bytes=50 * MiB, default_process_bytes=80 * MiB)
    )
    decision = policy.decide(0.0, idle=1)
    assert (decision.target, decision.limit, decision.surplus) == (0, Limit.MEMORY, 1)


def test_a_ready_process_is_never_surplus_for_one_still_starting() -> None:
    policy = PoolPolicy(BASE)
    policy.note_wake(0.0, "a")
    policy.note_wake(0.0, "b")
    # Two wanted, one idle, two starting: nothing is stopped now (a start may fail) ...
    assert policy.decide(1.0, idle=1).surplus == 0
    # ... and once all three are ready, one is surplus.
    assert policy.decide(2.0, idle=3).surplus == 1
