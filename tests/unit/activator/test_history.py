"""The history ring behind the status page's plots: bounded, numbered, one sample per interval."""

from __future__ import annotations

import pytest

from activator.observe.history import FIELDS, History, Sample


def _sample(ready: int, held: int = 0, replica_s: float = 0.0) -> Sample:
    return Sample(ready=ready, running=ready, held=held, in_flight=0, replica_seconds=replica_s)


def test_samples_come_back_in_order_with_their_times() -> None:
    h = History(["a", "b"], capacity=10, interval_s=1.0)
    for i in range(3):
        assert h.record(100.0 + i, {"a": _sample(i), "b": _sample(0, held=i * 2)})
    got = h.since(0)
    assert (got.first_seq, got.last_seq) == (1, 3)
    assert got.t == (100.0, 101.0, 102.0)
    assert got.models["a"]["ready"] == (0.0, 1.0, 2.0)
    assert got.models["b"]["held"] == (0.0, 2.0, 4.0)
    assert set(got.models["a"]) == set(FIELDS)


def test_at_most_one_sample_per_interval() -> None:
    h = History(["a"], capacity=10, interval_s=1.0)
    assert h.record(10.0, {"a": _sample(1)})
    assert not h.record(10.5, {"a": _sample(2)})  # the fleet ticks every 0.5 s
    assert h.record(11.0, {"a": _sample(3)})
    assert h.since(0).models["a"]["ready"] == (1.0, 3.0)


def test_the_ring_keeps_only_the_last_capacity_samples() -> None:
    h = History(["a"], capacity=4, interval_s=1.0)
    for i in range(10):
        h.record(float(i), {"a": _sample(i)})
    got = h.since(0)
    assert (got.first_seq, got.last_seq) == (7, 10)
    assert got.models["a"]["ready"] == (6.0, 7.0, 8.0, 9.0)
    # A poller that has seen up to 8 gets only 9 and 10; one far behind gets what is kept.
    assert h.since(8).models["a"]["ready"] == (8.0, 9.0)
    assert h.since(2).first_seq == 7


def test_nothing_new_is_an_empty_slice_that_says_where_the_ring_is() -> None:
    h = History(["a"], capacity=4, interval_s=1.0)
    h.record(1.0, {"a": _sample(1)})
    got = h.since(1)
    assert got.t == () and got.models["a"]["ready"] == ()
    assert (got.first_seq, got.last_seq) == (2, 1)
    assert got.to_json()["models"] == {"a": {f: [] for f in FIELDS}}


def test_a_model_without_a_sample_reads_as_zero_and_strangers_are_ignored() -> None:
    h = History(["a"], capacity=4, interval_s=1.0)
    h.record(1.0, {"zzz": _sample(5)})
    assert h.since(0).models == {"a": {f: (0.0,) for f in FIELDS}}


def test_memory_is_fixed_whatever_the_number_of_samples() -> None:
    h = History(["a", "b"], capacity=100, interval_s=0.0)
    sizes = []
    for i in range(1000):
        h.record(float(i), {"a": _sample(1), "b": _sample(2)})
        if i in (150, 999):
            sizes.append(sum(len(r._data) for cols in h._cols.values() for r in cols.values()))
    assert sizes[0] == sizes[1] == 2 * len(FIELDS) * 100


def test_a_ring_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="`capacity` = 0, must be at least 1"):
        History(["a"], capacity=0, interval_s=1.0)
