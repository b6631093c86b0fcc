"""A model's statistics ledger: live replicas' answers plus the counts of replicas gone."""

from __future__ import annotations

import random
from typing import Any

from activator.endpoint.replica_stats import StatsLedger, merge_stats, rows_for_versions, zero_stats


def _row(
    count: int,
    *,
    version: str = "1",
    fail: int = 0,
    last: int = 0,
    batches: dict[int, int] | None = None,
    memory: list[Any] | None = None,
) -> dict[str, Any]:
    """A runtime-shaped row: `count` successes of 10 ns each, `fail` failures."""
    row = zero_stats("m", version)
    row.update(inference_count=count, execution_count=count, last_inference=last)
    row["inference_stats"]["success"] = {"count": count, "ns": 10 * count}
    row["inference_stats"]["fail"] = {"count": fail, "ns": 5 * fail}
    row["batch_stats"] = [
        {"batch_size": size, "compute_infer": {"count": n, "ns": 3 * n}}
        for size, n in sorted((batches or {}).items())
    ]
    row["memory_usage"] = memory or []
    return row


def _successes(rows: list[dict[str, Any]] | None, version: str = "1") -> int:
    assert rows is not None
    (row,) = [r for r in rows if r["version"] == version]
    assert row["inference_stats"]["success"]["count"] == row["inference_count"]
    return int(row["inference_count"])


def test_merge_sums_counts_takes_latest_inference_and_merges_batches_by_size() -> None:
    a = _row(2, fail=1, last=50, batches={1: 2}, memory=[{"type": "CPU", "id": 0, "byte_size": 7}])
    b = _row(3, last=90, batches={4: 1, 1: 1})
    b["response_stats"] = {"0": {"success": {"count": 3, "ns": 9}}}
    (row,) = merge_stats([[a], [b]])
    assert row["inference_count"] == 5 and row["execution_count"] == 5
    assert row["inference_stats"]["success"] == {"count": 5, "ns": 50}
    assert row["inference_stats"]["fail"] == {"count": 1, "ns": 5}
    assert row["last_inference"] == 90
    assert [(x["batch_size"], x["compute_infer"]["count"]) for x in row["batch_stats"]] == [
        (1, 3),
        (4, 1),
    ]
    assert row["response_stats"] == {"0": {"success": {"count": 3, "ns": 9}}}  # kept, not lost
    assert row["memory_usage"] == a["memory_usage"]  # the first answer's, never summed


def test_merge_keeps_versions_apart_and_orders_rows_like_the_runtime() -> None:
    rows = merge_stats([[_row(1, version="2"), _row(4, version="1")], [_row(2, version="2")]])
    assert [(r["version"], r["inference_count"]) for r in rows] == [("1", 4), ("2", 3)]


def test_merge_ignores_junk_rows_and_values_from_a_broken_replica() -> None:
    junk = _row(1)
    junk["inference_count"] = "many"
    rows = merge_stats([[_row(2)], [junk, "not a row"]])  # type: ignore[list-item]
    assert rows[0]["inference_count"] == 2
    assert rows[0]["inference_stats"]["success"] == {"count": 3, "ns": 30}


def test_a_retired_replica_keeps_counting_after_it_is_gone() -> None:
    ledger = StatsLedger()
    ledger.record("r1", ledger.ticket(), [_row(3)])
    ledger.record("r2", ledger.ticket(), [_row(4)])
    assert _successes(ledger.total(["r1", "r2"])) == 7
    ledger.fold("r1", [_row(5)])  # its final answer, read after the drain
    assert _successes(ledger.total(["r2"])) == 9
    ledger.fold("r2")  # no final answer: the last one seen counts
    assert _successes(ledger.total([])) == 9
    ledger.record("r3", ledger.ticket(), [_row(1)])  # a new replica starts from zero
    assert _successes(ledger.total(["r3"])) == 10


def test_a_replica_that_died_is_folded_with_its_last_answer() -> None:
    ledger = StatsLedger()
    ledger.record("r1", ledger.ticket(), [_row(6, last=70)])
    rows = ledger.total([])  # r1 is no longer among the replicas
    assert rows is not None and _successes(rows) == 6 and rows[0]["last_inference"] == 70
    ledger.record("r1", ledger.ticket(), [_row(8)])  # a late answer from a gone replica
    assert _successes(ledger.total([])) == 6


def test_folding_twice_counts_once() -> None:
    ledger = StatsLedger()
    ledger.fold("r1", [_row(2)])
    ledger.fold("r1", [_row(2)])
    ledger.total([])
    assert _successes(ledger.total([])) == 2


def test_an_answer_from_an_earlier_read_never_replaces_a_later_one() -> None:
    ledger = StatsLedger()
    early, late = ledger.ticket(), ledger.ticket()
    ledger.record("r1", late, [_row(5)])
    ledger.record("r1", early, [_row(2)])  # the slower, older read finishes last
    assert _successes(ledger.total(["r1"])) == 5


def test_gone_replicas_hold_no_memory_and_live_ones_report_theirs() -> None:
    memory = [{"type": "CPU", "id": 0, "byte_size": 99}]
    ledger = StatsLedger()
    ledger.fold("old", [_row(1, memory=memory)])
    rows = ledger.total([])
    assert rows is not None and rows[0]["memory_usage"] == []
    ledger.record("new", ledger.ticket(), [_row(1, memory=memory)])
    rows = ledger.total(["new"])
    assert rows is not None and rows[0]["memory_usage"] == memory


def test_nothing_ever_answered_is_none_and_reads_as_zeros() -> None:
    ledger = StatsLedger()
    assert ledger.total(["r1"]) is None
    assert rows_for_versions("m", ["2", "1"], None) == [zero_stats("m", "1"), zero_stats("m", "2")]


def test_rows_for_versions_picks_the_asked_version_and_fills_unserved_ones() -> None:
    merged = merge_stats([[_row(3, version="1")]])
    assert rows_for_versions("m", ["1"], merged) == merged
    assert rows_for_versions("m", ["3"], merged) == [zero_stats("m", "3")]
    both = rows_for_versions("m", ["1", "3"], merged)
    assert [r["inference_count"] for r in both] == [3, 0]


def test_counts_never_go_back_through_any_order_of_serving_reading_and_retiring() -> None:
    """Replicas come and go at random, reads arrive late, out of order or never; every total
    the ledger gives is at least the previous one and at most the true count."""
    rng = random.Random(7)
    ledger = StatsLedger()
    served: dict[str, int] = {}  # each replica's true counter
    gone_true = 0
    pending: list[tuple[str, int, int]] = []  # reads in flight: (replica, ticket, count)
    next_id = 0
    previous = 0
    for _ in range(3000):
        action = rng.random()
        if action < 0.1 or not served:
            next_id += 1
            served[f"r{next_id}"] = 0
        elif action < 0.5:
            served[rng.choice(list(served))] += rng.randint(1, 3)
        elif action < 0.7:
            for rid, count in served.items():
                pending.append((rid, ledger.ticket(), count))
        elif action < 0.85 and pending:
            rid, ticket, count = pending.pop(rng.randrange(len(pending)))
            ledger.record(rid, ticket, [_row(count)])
        elif action < 0.93:
            rid = rng.choice(list(served))
            gone_true += served.pop(rid)  # died: the ledger notices it is missing
        else:
            rid = rng.choice(list(served))
            count = served.pop(rid)
            gone_true += count
            ledger.fold(rid, [_row(count)])  # retired: its final answer
        rows = ledger.total(served)
        total = _successes(rows) if rows else 0
        assert previous <= total <= gone_true + sum(served.values())
        previous = total
    for rid, count in served.items():
        ledger.record(rid, ledger.ticket(), [_row(count)])
    for rid in list(served):
        ledger.fold(rid, [_row(served[rid])])
    assert _successes(ledger.total([])) >= previous
