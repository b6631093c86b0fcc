"""The pure batch planner: today's policy takes the oldest request alone, whatever the time."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from runtime.batch_planner import OneRequest, Take, WaitUntil, plan
from tests.fakes.stepped_clock import SteppedClock


@dataclass(frozen=True)
class _Pending:
    name: str
    batch_size: int
    enqueued_ns: int


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
