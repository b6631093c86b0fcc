"""Stepped-clock stories of shared placement: bin-packing by budget, LRU eviction of idle
models only, a model's replicas spread, empty replicas released after their grace."""

from __future__ import annotations

import dataclasses

import pytest

from activator.scaler.placement import (
    Host,
    NewHost,
    PlaceOn,
    Resident,
    due_for_release,
    idle_residents,
    place,
)

MiB = 1 << 20
BUDGET = 1024 * MiB
GRACE = 5.0


def _place(model: str, need: int, hosts: list[Host], now: float) -> PlaceOn | NewHost:
    return place(model, need, hosts, now=now, grace_s=GRACE, budget_bytes=BUDGET)


def _load(host: Host, model: str, nbytes: int, now: float) -> Host:
    resident = Resident(model, nbytes, last_used_at=now)
    return dataclasses.replace(host, residents=(*host.residents, resident), empty_since=None)


def _evict(host: Host, models: tuple[str, ...], now: float) -> Host:
    left = tuple(r for r in host.residents if r.model not in models)
    return dataclasses.replace(host, residents=left, empty_since=None if left else now)


def _use(host: Host, model: str, now: float, *, in_flight: int = 0, held: int = 0) -> Host:
    residents = tuple(
        dataclasses.replace(r, last_used_at=now, in_flight=in_flight, held=held)
        if r.model == model
        else r
        for r in host.residents
    )
    return dataclasses.replace(host, residents=residents)


def test_the_first_model_starts_a_host_and_the_next_ones_pack_into_it_until_it_is_full() -> None:
    now = 0.0
    first = _place("a", 300 * MiB, [], now)
    assert first == NewHost(BUDGET, "no running replica to share")
    host = _load(Host("h1", first.budget_bytes), "a", 300 * MiB, now)
    for model in ("b", "c"):
        now += 1.0
        assert _place(model, 300 * MiB, [host], now) == PlaceOn("h1")
        host = _load(host, model, 300 * MiB, now)
    assert host.free_bytes == 124 * MiB
    # A fourth does not fit and nobody is idle yet (last request 1 s ago, grace 5 s).
    now += 1.0
    assert _place("d", 300 * MiB, [host], now) == NewHost(BUDGET, "no running replica has room")


def test_best_fit_chooses_the_host_left_with_the_least_room() -> None:
    roomy = _load(Host("h1", BUDGET), "a", 100 * MiB, 0.0)
    snug = _load(Host("h2", BUDGET), "b", 600 * MiB, 0.0)
    assert _place("c", 400 * MiB, [roomy, snug], 1.0) == PlaceOn("h2")
    # One that fits only the roomy host goes there.
    assert _place("c", 500 * MiB, [roomy, snug], 1.0) == PlaceOn("h1")


def test_the_least_recently_used_idle_model_is_evicted_once_its_grace_has_passed() -> None:
    host = Host("h1", BUDGET)
    for t, model in ((0.0, "a"), (1.0, "b"), (2.0, "c")):
        host = _load(host, model, 300 * MiB, t)
    host = _use(host, "a", 3.0)  # "a" used again: "b" is now the oldest
    # At 6.5 s "b" (last used 1 s) and "c" (2 s) are past the 5 s grace, "a" (3 s) is not.
    assert [r.model for r in idle_residents(host, 6.5, GRACE)] == ["b"]
    assert _place("d", 300 * MiB, [host], 6.5) == PlaceOn("h1", evict=("b",))
    # Needing two residents' room evicts the two oldest idle ones, oldest first.
    assert _place("d", 500 * MiB, [host], 7.5) == PlaceOn("h1", evict=("b", "c"))


def test_a_busy_model_is_never_evicted_however_old_its_last_request() -> None:
    host = _load(_load(Host("h1", BUDGET), "busy", 500 * MiB, 0.0), "held", 400 * MiB, 0.0)
    host = _use(host, "busy", 0.0, in_flight=1)
    host = _use(host, "held", 0.0, held=3)  # requests held for it (e.g. at its breaker)
    assert idle_residents(host, 1000.0, GRACE) == []
    decision = _place("new", 300 * MiB, [host], 1000.0)
    assert isinstance(decision, NewHost)
    # Once the busy one's request finishes (and the grace passes), it may go.
    done = _use(host, "busy", 1000.0)
    assert _place("new", 300 * MiB, [done], 1004.0) == NewHost(BUDGET, decision.reason)
    assert _place("new", 300 * MiB, [done], 1005.0) == PlaceOn("h1", evict=("busy",))


def test_a_model_that_never_goes_to_zero_is_never_evicted() -> None:
    pinned = dataclasses.replace(Resident("always_on", 900 * MiB), pinned=True)
    host = Host("h1", BUDGET, (pinned,))
    assert idle_residents(host, 1e6, GRACE) == []
    assert isinstance(_place("new", 300 * MiB, [host], 1e6), NewHost)


def test_eviction_prefers_the_host_that_frees_the_fewest_bytes() -> None:
    big = _load(Host("h1", BUDGET), "big", 900 * MiB, 0.0)
    small = _load(_load(Host("h2", BUDGET), "s1", 400 * MiB, 0.0), "s2", 400 * MiB, 0.0)
    # h2 has 224 MiB free: evicting s1 (400 MiB) makes room; h1 would give up 900 MiB.
    assert _place("new", 500 * MiB, [big, small], 10.0) == PlaceOn("h2", evict=("s1",))


def test_a_model_s_second_replica_goes_to_another_host() -> None:
    h1 = _load(Host("h1", BUDGET), "a", 100 * MiB, 0.0)
    h2 = Host("h2", BUDGET)
    assert _place("a", 100 * MiB, [h1, h2], 1.0) == PlaceOn("h2")
    # With no other host, a new one starts, even though h1 has room.
    assert isinstance(_place("a", 100 * MiB, [h1], 1.0), NewHost)
    # Its own old replica is never evicted to make room for its new one.
    full = _load(Host("h3", 200 * MiB), "a", 200 * MiB, 0.0)
    assert isinstance(_place("a", 100 * MiB, [full], 100.0), NewHost)


def test_a_model_larger_than_the_budget_gets_a_host_of_its_own_size() -> None:
    decision = _place("huge", 3 * BUDGET, [Host("h1", BUDGET)], 0.0)
    assert decision == NewHost(
        3 * BUDGET, f"needs {3 * BUDGET} bytes, more than a replica's budget of {BUDGET}"
    )


def test_a_load_in_progress_holds_its_room_and_its_model() -> None:
    host = Host("h1", BUDGET, reserved_bytes=800 * MiB, loading=("a",))
    assert isinstance(_place("b", 300 * MiB, [host], 0.0), NewHost)
    assert _place("b", 200 * MiB, [host], 0.0) == PlaceOn("h1")
    # A second replica of the model being loaded there goes elsewhere (scale-out from zero).
    assert isinstance(_place("a", 100 * MiB, [host], 0.0), NewHost)


def test_an_empty_host_is_released_after_its_grace_and_not_before() -> None:
    host = _load(Host("h1", BUDGET), "a", 100 * MiB, 0.0)
    assert due_for_release([host], now=100.0, grace_s=GRACE) == []  # it has a resident
    empty = _evict(host, ("a",), 10.0)
    assert due_for_release([empty], now=14.9, grace_s=GRACE) == []
    assert due_for_release([empty], now=15.0, grace_s=GRACE) == ["h1"]
    # A load in progress keeps it, and so does a model loaded again.
    loading = dataclasses.replace(empty, reserved_bytes=MiB)
    assert due_for_release([loading], now=100.0, grace_s=GRACE) == []
    assert due_for_release([_load(empty, "b", MiB, 12.0)], now=100.0, grace_s=GRACE) == []


def test_a_negative_need_is_refused() -> None:
    with pytest.raises(ValueError, match="need_bytes = -1, must be >= 0"):
        _place("a", -1, [], 0.0)


def _place_beside(
    model: str, need: int, hosts: list[Host], now: float, peers: tuple[str, ...]
) -> PlaceOn | NewHost:
    return place(model, need, hosts, now=now, grace_s=GRACE, budget_bytes=BUDGET, peers=peers)


def test_a_model_goes_beside_its_peers_not_to_the_best_fit() -> None:
    tight = _load(Host("h1", BUDGET), "other", 700 * MiB, 0.0)  # the best fit for 300 MiB
    roomy = _load(Host("h2", BUDGET), "peer", 100 * MiB, 0.0)
    assert _place("a", 300 * MiB, [tight, roomy], 1.0) == PlaceOn("h1")  # no peers: best fit
    assert _place_beside("a", 300 * MiB, [tight, roomy], 1.0, ("peer",)) == PlaceOn("h2")
    # A peer still loading holds its host as well (two wakes at once meet in one host).
    loading = dataclasses.replace(Host("h3", BUDGET), reserved_bytes=MiB, loading=("peer",))
    assert _place_beside("a", 300 * MiB, [tight, loading], 1.0, ("peer",)) == PlaceOn("h3")


def test_beside_its_peers_a_model_evicts_idle_residents_or_goes_over_budget() -> None:
    host = _load(_load(Host("h1", BUDGET), "peer", 600 * MiB, 0.0), "idle", 300 * MiB, 0.0)
    empty = Host("h2", BUDGET)  # room to spare, but no peer on it
    later = GRACE + 1.0
    assert _place_beside("a", 300 * MiB, [host, empty], later, ("peer",)) == PlaceOn(
        "h1", evict=("idle",)
    )
    # Nobody idle: beside the peer all the same, over the budget, not on the empty host.
    busy = _use(_use(host, "idle", later, in_flight=1), "peer", later, in_flight=1)
    assert _place_beside("a", 300 * MiB, [busy, empty], later, ("peer",)) == PlaceOn(
        "h1", over_budget=True
    )


def test_a_second_replica_of_a_model_with_peers_spreads_and_meets_a_peer_there() -> None:
    both = _load(_load(Host("h1", BUDGET), "a", 100 * MiB, 0.0), "b", 100 * MiB, 0.0)
    # No other host holds a peer: the second replica of `a` goes anywhere but h1.
    assert _place_beside("a", 100 * MiB, [both], 1.0, ("b",)) == NewHost(
        BUDGET, "no running replica to share"
    )
    alone = _load(Host("h2", BUDGET), "a", 100 * MiB, 0.0)
    # The second replica of `b` goes beside that replica of `a`, not beside the first.
    assert _place_beside("b", 100 * MiB, [both, alone], 1.0, ("a",)) == PlaceOn("h2")
    # Of two hosts with peers and no room, the roomier one; a tie to the lowest id.
    full = [_load(Host(h, 200 * MiB), "a", 200 * MiB, 0.0) for h in ("h4", "h3")]
    busy = [_use(h, "a", 1.0, in_flight=1) for h in full]
    assert _place_beside("b", 100 * MiB, busy, 1.0, ("a",)) == PlaceOn("h3", over_budget=True)
