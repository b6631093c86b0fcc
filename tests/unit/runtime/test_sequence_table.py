"""Sequence slots as stories on a stepped clock: assign, continue, end, backlog, idle release."""

from __future__ import annotations

from runtime.scheduling.sequence_table import (
    Assigned,
    Backlogged,
    Placement,
    Refused,
    SequenceTable,
)
from tests.fakes.stepped_clock import SteppedClock

MS = 1_000_000


def _table(instances: int = 2, slots: int = 1, idle_ms: int = 100) -> SequenceTable:
    return SequenceTable(model="m", instances=instances, slots=slots, idle_ns=idle_ms * MS)


def test_a_sequence_keeps_its_slot_from_start_to_end_and_spreads_over_instances() -> None:
    clock, table = SteppedClock(), _table()
    a = table.route("a", start=True, now_ns=clock.now)
    b = table.route("b", start=True, now_ns=clock.now)
    assert {a, b} == {Assigned(0, 0), Assigned(1, 0)}  # one per instance first
    assert table.route("a", start=False, now_ns=clock.now) == a  # its END, in flight too
    # The END finishes first (a client that went away): the slot waits for the other one.
    assert table.finished("a", end=True, now_ns=clock.now) == []
    assert table.holds("a") == a
    assert table.finished("a", end=False, now_ns=clock.now) == []  # the last one: released
    assert table.holds("a") is None and table.live == 1


def test_a_request_without_start_for_an_unknown_sequence_is_refused() -> None:
    table = _table()
    refused = table.route(7, start=False, now_ns=0)
    assert isinstance(refused, Refused)
    assert "sequence 7 to model 'm' must specify the START flag" in refused.message
    assert table.live == 0


def test_a_start_while_every_slot_is_held_waits_in_the_backlog_oldest_first() -> None:
    clock, table = SteppedClock(), _table(instances=1)
    assert table.route("a", start=True, now_ns=clock.now) == Assigned(0, 0)
    assert table.route("b", start=True, now_ns=clock.now) == Backlogged()
    assert table.route("c", start=True, now_ns=clock.now) == Backlogged()
    assert table.route("b", start=False, now_ns=clock.now) == Backlogged()  # b's next request
    assert table.live == 3
    table.finished("a", end=False, now_ns=clock.now)
    placed = table.finished("a", end=True, now_ns=clock.now)
    assert placed == [Placement("b", 0, 0)]  # b, then c, in arrival order
    assert table.holds("b") == Assigned(0, 0) and table.holds("c") is None


def test_an_idle_sequence_is_released_at_its_deadline_and_not_while_busy() -> None:
    clock, table = SteppedClock(), _table(instances=1, idle_ms=100)
    table.route("busy", start=True, now_ns=clock.now)  # in flight: never idle
    assert table.next_expiry() is None
    table.finished("busy", end=False, now_ns=clock.now)
    assert table.next_expiry() == clock.now + 100 * MS
    table.route("waiting", start=True, now_ns=clock.now)  # no slot: backlog
    clock.advance(99 * MS)
    assert table.expire(clock.now) == ([], [])
    clock.advance(1 * MS)
    released, placed = table.expire(clock.now)
    assert released == ["busy"] and placed == [Placement("waiting", 0, 0)]
    later = table.route("busy", start=False, now_ns=clock.now)
    assert isinstance(later, Refused)  # released: it must start again


def test_a_sequence_out_of_the_backlog_is_idle_from_when_it_got_its_slot() -> None:
    # Its time in the backlog is its client waiting, not the sequence idle: released at once
    # after its first request, the client's next one would be refused (Triton 2.51 keeps it:
    # its reaper looks again 50 ms later, by when the next request has come).
    clock, table = SteppedClock(), _table(instances=1, idle_ms=100)
    table.route("a", start=True, now_ns=clock.now)
    table.finished("a", end=False, now_ns=clock.now)
    table.route("b", start=True, now_ns=clock.now)  # no slot: backlog, in flight
    clock.advance(100 * MS)
    assert table.expire(clock.now) == (["a"], [Placement("b", 0, 0)])
    clock.advance(5 * MS)
    table.finished("b", end=False, now_ns=clock.now)  # its START ran
    assert table.next_expiry() == clock.now - 5 * MS + 100 * MS
    assert table.expire(clock.now) == ([], [])
    assert table.route("b", start=False, now_ns=clock.now) == Assigned(0, 0)


def test_a_new_request_resets_the_idle_clock() -> None:
    clock, table = SteppedClock(), _table(idle_ms=100)
    table.route("s", start=True, now_ns=clock.now)
    table.finished("s", end=False, now_ns=clock.now)
    clock.advance(80 * MS)
    table.route("s", start=False, now_ns=clock.now)
    table.finished("s", end=False, now_ns=clock.now)
    clock.advance(80 * MS)
    assert table.expire(clock.now) == ([], [])
    clock.advance(20 * MS)
    assert table.expire(clock.now)[0] == ["s"]


def test_slots_fill_lowest_index_first_across_instances() -> None:
    table = _table(instances=2, slots=2)
    routes = [table.route(i, start=True, now_ns=0) for i in range(4)]
    assert routes == [Assigned(0, 0), Assigned(1, 0), Assigned(0, 1), Assigned(1, 1)]
    assert table.route(9, start=True, now_ns=0) == Backlogged()


def test_a_cancelled_sequence_leaves_the_backlog_or_frees_its_slot_once_idle() -> None:
    clock, table = SteppedClock(), _table(instances=1)
    assert table.route("a", start=True, now_ns=clock.now) == Assigned(0, 0)
    assert table.route("a", start=False, now_ns=clock.now) == Assigned(0, 0)  # queued behind
    assert isinstance(table.route("b", start=True, now_ns=clock.now), Backlogged)
    table.cancel("b")  # backlogged: gone, its requests find no slot waiting for them
    assert table.live == 1
    table.cancel("a")  # its queued request was cancelled; the running one still runs
    assert table.finished("a", end=False, now_ns=clock.now) == []  # the cancelled one
    assert table.holds("a") == Assigned(0, 0)
    assert table.finished("a", end=False, now_ns=clock.now) == []  # the running one: freed
    assert table.holds("a") is None and table.live == 0
