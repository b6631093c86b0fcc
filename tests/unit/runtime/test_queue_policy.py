"""Triton's queue policies: priority levels, queue limits, timeouts that only shorten."""

from __future__ import annotations

from dataclasses import dataclass

from runtime.scheduling.queue_policy import (
    QUEUE_FULL,
    Admitted,
    LevelPolicy,
    QueuePolicies,
    Refused,
    admit,
    expire,
)
from tritonconfig import parse_config

US = 1_000
NOW = 5_000_000_000


def _policies(text: str) -> QueuePolicies:
    config = parse_config(f'name: "m" max_batch_size: 4 dynamic_batching {{ {text} }}', "test")
    return QueuePolicies.from_config(config.dynamic_batching)


def test_priorities_pick_levels_and_out_of_range_means_the_default_level() -> None:
    policies = _policies("priority_levels: 3 default_priority_level: 2")
    assert [policies.level_of(p) for p in (1, 2, 3)] == [1, 2, 3]
    # Triton: 0 (not given) and anything past `priority_levels` queue at the default level.
    assert [policies.level_of(p) for p in (0, 4, 2**64 - 1)] == [2, 2, 2]
    assert _policies("").level_of(7) == 0  # one queue without levels


def test_a_full_level_refuses_at_once_while_other_levels_still_admit() -> None:
    policies = _policies(
        "priority_levels: 2 default_priority_level: 2 "
        "priority_queue_policy { key: 1 value: { max_queue_size: 1 } }"
    )
    assert admit({1: 1}, priority=1, timeout_us=0, now_ns=NOW, policies=policies) == Refused(
        QUEUE_FULL
    )
    # Level 2 has the default policy: no limit.
    assert isinstance(
        admit({1: 1, 2: 50}, priority=2, timeout_us=0, now_ns=NOW, policies=policies), Admitted
    )
    assert isinstance(admit({}, priority=1, timeout_us=0, now_ns=NOW, policies=policies), Admitted)


def test_a_request_timeout_may_shorten_the_default_but_never_lengthen_it() -> None:
    overridable = LevelPolicy(default_timeout_us=1000, allow_timeout_override=True)
    assert overridable.timeout_us(10) == 10
    assert overridable.timeout_us(0) == 1000
    assert overridable.timeout_us(2**64 - 1) == 1000  # huge: not longer
    fixed = LevelPolicy(default_timeout_us=1000)
    assert fixed.timeout_us(10) == 1000  # no override allowed
    # As in Triton, a level without a default timeout gives none, whatever the request asks.
    assert LevelPolicy(allow_timeout_override=True).timeout_us(10) == 0


def test_admission_sets_the_deadline_and_the_timeout_action() -> None:
    policies = _policies(
        "default_queue_policy { default_timeout_microseconds: 300 timeout_action: DELAY "
        "allow_timeout_override: true }"
    )
    admitted = admit({}, priority=0, timeout_us=100, now_ns=NOW, policies=policies)
    assert admitted == Admitted(level=0, deadline_ns=NOW + 100 * US, delay=True)
    none = admit({}, priority=0, timeout_us=0, now_ns=NOW, policies=_policies(""))
    assert none == Admitted(level=0, deadline_ns=0, delay=False)


@dataclass
class _Waiting:
    name: str
    deadline_ns: int
    delay_on_timeout: bool = False


def test_expire_rejects_due_reject_requests_and_names_the_next_deadline() -> None:
    pending = [
        _Waiting("no-timeout", 0),
        _Waiting("due", NOW),
        _Waiting("delayed", NOW - 1, delay_on_timeout=True),  # DELAY: never rejected
        _Waiting("later", NOW + 50 * US),
        _Waiting("soon", NOW + 10 * US),
    ]
    expiry = expire(pending, NOW)
    assert [item.name for item in expiry.rejected] == ["due"]
    assert expiry.next_deadline_ns == NOW + 10 * US
    assert expire(pending[:1], NOW).next_deadline_ns == 0
