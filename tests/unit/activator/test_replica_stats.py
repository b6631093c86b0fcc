"""Merging the statistics of a model's replicas."""

from __future__ import annotations

from activator.endpoint.replica_stats import merge_stats, zero_stats


def _row(count: int, ns: int, last: int, batch: int = 1) -> dict[str, object]:
    row = zero_stats("m", "1")
    row.update(inference_count=count, execution_count=count, last_inference=last)
    row["inference_stats"]["success"] = {"count": count, "ns": ns}  # type: ignore[index]
    row["batch_stats"] = [
        {"batch_size": batch, "compute_infer": {"count": count, "ns": ns}},
    ]
    return row


def test_replica_rows_are_summed_per_version() -> None:
    merged = merge_stats([[_row(2, 100, 5)], [_row(3, 50, 9)], [_row(1, 1, 1, batch=4)]])
    assert len(merged) == 1
    (row,) = merged
    assert row["inference_count"] == 6 and row["execution_count"] == 6
    assert row["last_inference"] == 9
    assert row["inference_stats"]["success"] == {"count": 6, "ns": 151}
    assert row["inference_stats"]["fail"] == {"count": 0, "ns": 0}
    sizes = {b["batch_size"]: b["compute_infer"]["count"] for b in row["batch_stats"]}
    assert sizes == {1: 5, 4: 1}


def test_one_answer_is_returned_unchanged() -> None:
    assert merge_stats([[_row(2, 100, 5)]]) == [_row(2, 100, 5)]
