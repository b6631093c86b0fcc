"""The pure batch planner: one request at a time, or Triton's dynamic batcher, told as stories
on a stepped clock."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import pytest

from runtime.scheduling.batch_planner import DynamicBatching, OneRequest, Take, WaitUntil, plan
from tests.fakes.stepped_clock import SteppedClock

US = 1_000
MS = 1_000_000


@dataclass(frozen=True)
class _Pending:
    name: str
    batch_size: int
    enqueued_ns: int
    level: int = 0
    deadline_ns: int = 0
    delay_on_timeout: bool = False
    shape_key: Hashable = None


def _names(decision: Take[_Pending] | WaitUntil) -> list[str]:
    assert isinstance(decision, Take), decision
    return [item.name for item in decision.items]


def _arrive(
    clock: SteppedClock, pending: list[_Pending], name: str, size: int = 1, **kw: object
) -> None:
    pending.append(_Pending(name, size, clock.now, **kw))  # type: ignore[arg-type]


def test_one_request_takes_the_oldest_alone_at_every_moment() -> None:
    clock = SteppedClock()
    pending = [
        _Pending("first", 1, clock.now),
        _Pending("big", 8, clock.now + 10),
        _Pending("last", 1, clock.now + 20),
    ]
    # A moment after they arrived, a second later, an hour later: never a wait, never more.
    for step in (0, 1_000, 1_000_000_000, 3600 * 10**9):
        clock.advance(step)
        decision = plan(pending, clock.now_ns(), OneRequest())
        assert decision == Take((pending[0],))
        assert not isinstance(decision, WaitUntil)


def test_requests_leave_in_arrival_order() -> None:
    clock = SteppedClock()
    pending = []
    for i in range(5):
        pending.append(_Pending(str(i), 1 + i % 3, clock.now))
        clock.advance(250_000)
    taken = []
    while pending:
        decision = plan(pending, clock.now_ns(), OneRequest())
        assert isinstance(decision, Take)
        taken.extend(item.name for item in decision.items)
        pending = [p for p in pending if p not in decision.items]
        clock.advance(1)
    assert taken == ["0", "1", "2", "3", "4"]


def test_nothing_pending_and_empty_takes_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one pending request"):
        plan([], 0, OneRequest())
    with pytest.raises(ValueError, match="at least one request"):
        Take(())


# -- dynamic batching (Triton's GetDynamicBatch) ----------------------------------------------


def test_a_lone_request_at_idle_waits_the_queue_delay_and_no_longer() -> None:
    clock = SteppedClock()
    policy = DynamicBatching(max_batch_size=8, preferred=frozenset({8}), max_queue_delay_ns=5 * MS)
    pending: list[_Pending] = []
    _arrive(clock, pending, "a")
    assert plan(pending, clock.now, policy) == WaitUntil(pending[0].enqueued_ns + 5 * MS)
    clock.advance(5 * MS - 1)
    assert isinstance(plan(pending, clock.now, policy), WaitUntil)
    clock.advance(1)  # the deadline: it goes alone, nobody else came
    assert _names(plan(pending, clock.now, policy)) == ["a"]


def test_a_preferred_size_goes_at_once_and_the_rest_waits_its_turn() -> None:
    clock = SteppedClock()
    policy = DynamicBatching(
        max_batch_size=16, preferred=frozenset({4, 8}), max_queue_delay_ns=100 * MS
    )
    pending: list[_Pending] = []
    for i in range(3):
        _arrive(clock, pending, f"r{i}")
        clock.advance(10 * US)
    assert isinstance(plan(pending, clock.now, policy), WaitUntil)  # 3: no preferred size yet
    _arrive(clock, pending, "r3")  # 4 is preferred: no waiting for the delay
    assert _names(plan(pending, clock.now, policy)) == ["r0", "r1", "r2", "r3"]
    for i in range(4, 14):
        _arrive(clock, pending, f"r{i}")
    # 14 queued: the largest preferred size reachable in order is 8.
    assert _names(plan(pending, clock.now, policy)) == [f"r{i}" for i in range(8)]


def test_without_a_delay_whatever_is_queued_goes_up_to_the_max_batch_size() -> None:
    clock = SteppedClock()
    policy = DynamicBatching(max_batch_size=4, preferred=frozenset({4}))
    pending: list[_Pending] = []
    _arrive(clock, pending, "a")
    assert _names(plan(pending, clock.now, policy)) == ["a"]  # no delay: at once, alone
    for name in "bcdef":
        _arrive(clock, pending, name)
    assert _names(plan(pending, clock.now, policy)) == ["a", "b", "c", "d"]


def test_request_batch_sizes_add_up_and_a_request_that_does_not_fit_waits() -> None:
    clock = SteppedClock()
    policy = DynamicBatching(max_batch_size=8, preferred=frozenset({8}), max_queue_delay_ns=MS)
    pending: list[_Pending] = []
    _arrive(clock, pending, "five", 5)
    _arrive(clock, pending, "four", 4)  # 9 > 8: the batch is cut before it
    assert _names(plan(pending, clock.now, policy)) == ["five"]
    _arrive(clock, pending, "big", 8)
    assert _names(plan(pending[1:], clock.now, policy)) == ["four"]  # next one: cut by "big"


def test_requests_of_different_shapes_are_not_batched_together() -> None:
    clock = SteppedClock()
    policy = DynamicBatching(max_batch_size=8, preferred=frozenset({8}), max_queue_delay_ns=MS)
    pending: list[_Pending] = []
    _arrive(clock, pending, "len3", shape_key=(("IN", (3,)),))
    _arrive(clock, pending, "len3b", shape_key=(("IN", (3,)),))
    _arrive(clock, pending, "len5", shape_key=(("IN", (5,)),))
    _arrive(clock, pending, "len3c", shape_key=(("IN", (3,)),))
    # The batch is cut at the first request of another shape: it goes now, in order.
    assert _names(plan(pending, clock.now, policy)) == ["len3", "len3b"]


def test_after_the_delay_the_whole_batch_goes_even_past_the_largest_preferred_size() -> None:
    clock = SteppedClock()
    policy = DynamicBatching(max_batch_size=8, preferred=frozenset({2}), max_queue_delay_ns=MS)
    pending: list[_Pending] = []
    for name in "abc":
        _arrive(clock, pending, name, 1)
    assert _names(plan(pending, clock.now, policy)) == ["a", "b"]  # preferred 2, at once
    clock.advance(MS)
    assert _names(plan(pending, clock.now, policy)) == ["a", "b", "c"]  # delay over: all


def test_higher_priority_levels_go_first_and_timed_out_delay_requests_last() -> None:
    clock = SteppedClock()
    policy = DynamicBatching(max_batch_size=2, preferred=frozenset({2}), prioritized=True)
    pending: list[_Pending] = []
    _arrive(clock, pending, "low-old", level=2)
    _arrive(clock, pending, "late", level=1, deadline_ns=clock.now + MS, delay_on_timeout=True)
    _arrive(clock, pending, "low-new", level=2)
    _arrive(clock, pending, "high", level=1)
    assert _names(plan(pending, clock.now, policy)) == ["late", "high"]
    clock.advance(2 * MS)  # "late" timed out under DELAY: behind its level's others
    assert _names(plan(pending, clock.now, policy)) == ["high", "late"]


def test_a_coming_delay_timeout_is_a_time_to_plan_again() -> None:
    # qa/L0_model_queue's test_priority_with_policy: a batch of 1 + 2 + 2 waits for a
    # preferred 4; when the 1 times out under DELAY it moves behind, and 2 + 2 goes at once.
    clock = SteppedClock()
    policy = DynamicBatching(
        max_batch_size=32,
        preferred=frozenset({4, 8}),
        max_queue_delay_ns=10_000 * MS,
        prioritized=True,
    )
    pending: list[_Pending] = []
    _arrive(clock, pending, "a", 2, level=1)
    _arrive(clock, pending, "late", 1, level=1, deadline_ns=clock.now + MS, delay_on_timeout=True)
    _arrive(clock, pending, "b", 2, level=1)
    assert plan(pending, clock.now, policy) == WaitUntil(clock.now + MS)  # not the 10 s delay
    clock.advance(MS)
    assert _names(plan(pending, clock.now, policy)) == ["a", "b"]


def test_max_batch_size_zero_config_runs_each_request_alone() -> None:
    from tritonconfig import parse_config

    config = parse_config(
        'name: "m" max_batch_size: 0 dynamic_batching { max_queue_delay_microseconds: 100 }',
        "test",
    )
    policy = DynamicBatching.from_config(config)
    assert policy.max_batch_size == 1
    clock = SteppedClock()
    pending: list[_Pending] = []
    _arrive(clock, pending, "a")
    _arrive(clock, pending, "b")
    assert _names(plan(pending, clock.now, policy)) == ["a"]


def _drain(
    pending: Sequence[_Pending], clock: SteppedClock, policy: DynamicBatching
) -> list[list[str]]:
    """Plan until nothing is pending, stepping to each WaitUntil; the batches in order."""
    left = list(pending)
    batches = []
    while left:
        decision = plan(left, clock.now, policy)
        if isinstance(decision, WaitUntil):
            assert decision.deadline_ns > clock.now
            clock.advance(decision.deadline_ns - clock.now)
            continue
        batches.append([item.name for item in decision.items])
        left = [p for p in left if p not in decision.items]
    return batches


def test_every_request_is_taken_exactly_once_in_order_within_its_level() -> None:
    clock = SteppedClock()
    policy = DynamicBatching(
        max_batch_size=5, preferred=frozenset({3, 5}), max_queue_delay_ns=2 * MS, prioritized=True
    )
    pending: list[_Pending] = []
    for i in range(23):
        _arrive(clock, pending, f"{i % 3}-{i}", 1 + i % 2, level=1 + i % 3)
        clock.advance(300 * US)
    batches = _drain(pending, clock, policy)
    taken = [name for batch in batches for name in batch]
    assert sorted(taken) == sorted(p.name for p in pending)
    for level in "012":
        mine = [int(n.split("-")[1]) for n in taken if n.startswith(level)]
        assert mine == sorted(mine)
    sizes = {p.name: p.batch_size for p in pending}
    assert all(sum(sizes[n] for n in batch) <= 5 for batch in batches)
