"""A shared pod's booking (the `thaw.dev/shared-load` annotation): read strictly, changed as a
value, written as a patch conditional on the resourceVersion read, and seen by the shared
placement policy as a host whose unknown residents are never evicted on a guess."""

from __future__ import annotations

from typing import Any

import pytest

from activator.scaler.kubernetes.pod_budget import (
    ANNOTATION_SHARED_LOAD,
    ModelUse,
    PodLoad,
    booked_models,
    booking_patch,
    host_of,
    load_of,
    node_of,
    place_spread,
    shared_status,
)
from activator.scaler.placement import Host, NewHost, PlaceOn, Resident, place

MiB = 1 << 20


def _pod(name: str, load: PodLoad | None, *, version: str = "7") -> dict[str, Any]:
    annotations = {} if load is None else {ANNOTATION_SHARED_LOAD: load.to_text()}
    return {"metadata": {"name": name, "resourceVersion": version, "annotations": annotations}}


def test_a_booking_round_trips_through_its_annotation() -> None:
    load = PodLoad(10 * MiB, {"b": 3 * MiB, "a": MiB})
    assert load.used_bytes == 4 * MiB
    assert load_of(_pod("p", load)) == load
    assert load_of(_pod("p", None)) is None  # a pod that does not share


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "not JSON"),
        ("[]", "must be a JSON object"),
        ('{"models": {}}', "'budget_bytes' must be a non-negative integer"),
        ('{"budget_bytes": -1}', "'budget_bytes' must be a non-negative integer"),
        ('{"budget_bytes": true}', "'budget_bytes' must be a non-negative integer"),
        ('{"budget_bytes": 5, "models": []}', "'models' must be a JSON object"),
        ('{"budget_bytes": 5, "models": {"a": "1"}}', "'models.a' must be a non-negative"),
        ('{"budget_bytes": 5, "x": "' + "y" * 70000 + '"}', "longer than"),
        ('{"budget_bytes": 5, "class": "GPU!"}', "'class' must be a placement class name"),
        ('{"budget_bytes": 5, "class": 3}', "'class' must be a placement class name"),
    ],
)
def test_a_malformed_annotation_is_refused_naming_what_is_wrong(text: str, says: str) -> None:
    pod = {"metadata": {"name": "p", "annotations": {ANNOTATION_SHARED_LOAD: text}}}
    with pytest.raises(ValueError, match=says):
        load_of(pod)


def test_a_booking_keeps_its_placement_class_and_the_default_is_not_written() -> None:
    gpu = PodLoad(10 * MiB, {"a": MiB}, placement_class="gpu")
    assert load_of(_pod("p", gpu)) == gpu
    assert '"class":"gpu"' in gpu.to_text()
    assert gpu.booked("b", MiB).placement_class == "gpu"  # a booking never changes the class
    assert gpu.without("a").placement_class == "gpu"
    plain = PodLoad(10 * MiB, {"a": MiB})
    assert "class" not in plain.to_text()  # as bookings made before classes were written
    assert PodLoad.from_text('{"budget_bytes": 5}').placement_class == "default"


def test_booking_evicts_then_adds_and_unbooking_frees() -> None:
    load = PodLoad(10 * MiB, {"a": 4 * MiB, "b": 4 * MiB})
    after = load.booked("c", 5 * MiB, evict=("a",))
    assert dict(after.models) == {"b": 4 * MiB, "c": 5 * MiB}
    assert dict(after.without("b").models) == {"c": 5 * MiB}
    assert dict(load.models) == {"a": 4 * MiB, "b": 4 * MiB}  # a value: the old one unchanged
    with pytest.raises(ValueError, match="`nbytes` = -1"):
        load.booked("c", -1)


def test_the_patch_carries_the_resource_version_read() -> None:
    load = PodLoad(10 * MiB, {"a": MiB})
    patch = booking_patch(_pod("p", None, version="42"), load)
    assert patch["metadata"]["resourceVersion"] == "42"
    assert PodLoad.from_text(patch["metadata"]["annotations"][ANNOTATION_SHARED_LOAD]) == load


def test_the_policy_evicts_only_a_known_idle_model_from_a_pod() -> None:
    pod = _pod("p", PodLoad(10 * MiB, {"idle": 4 * MiB, "busy": 4 * MiB, "unknown": MiB}))
    use = {
        "idle": ModelUse(last_used_at=10.0),
        "busy": ModelUse(in_flight=1, last_used_at=10.0),
    }
    host = host_of(pod, load_of(pod) or PodLoad(0), use, now=100.0)
    assert host.id == "p" and host.free_bytes == MiB
    decision = place("new", 4 * MiB, [host], now=100.0, grace_s=2.0, budget_bytes=10 * MiB)
    assert decision == PlaceOn("p", evict=("idle",))
    # Needing more than the idle one frees: `busy` and the model no activator reported
    # (counted as used just now) stay, and a new pod is asked for instead.
    decision = place("new", 6 * MiB, [host], now=100.0, grace_s=2.0, budget_bytes=10 * MiB)
    assert isinstance(decision, NewHost)


def test_an_empty_pod_carries_when_it_was_first_seen_empty() -> None:
    pod = _pod("p", PodLoad(10 * MiB))
    assert host_of(pod, PodLoad(10 * MiB), {}, now=5.0, empty_since=3.0).empty_since == 3.0
    full = PodLoad(10 * MiB, {"a": 1})
    assert host_of(pod, full, {}, now=5.0, empty_since=3.0).empty_since is None


def _spread(need: int, *hosts: tuple[Host, str | None]) -> PlaceOn | NewHost:
    return place_spread("m", need, hosts, now=100.0, grace_s=2.0, budget_bytes=10 * MiB)


def test_a_models_second_replica_goes_to_another_node_when_that_costs_no_eviction() -> None:
    has_m = Host("a1", 10 * MiB, (Resident("m", MiB, last_used_at=100.0),))
    same_node = Host("a2", 10 * MiB, (Resident("x", 7 * MiB, last_used_at=100.0),))
    other_node = Host("b1", 10 * MiB, (Resident("y", 2 * MiB, last_used_at=100.0),))
    # Best fit alone would pick a2 (least room left): the pod beside m's on node A.
    assert place("m", 2 * MiB, [has_m, same_node, other_node], now=100.0, grace_s=2.0,
                 budget_bytes=10 * MiB) == PlaceOn("a2")  # fmt: skip
    assert _spread(2 * MiB, (has_m, "A"), (same_node, "A"), (other_node, "B")) == PlaceOn("b1")
    # No room on node B without evicting its idle model: a second replica on node A is
    # better than an eviction.
    idle = Host("b1", 10 * MiB, (Resident("y", 9 * MiB, last_used_at=0.0),))
    assert _spread(2 * MiB, (has_m, "A"), (same_node, "A"), (idle, "B")) == PlaceOn("a2")
    # Nowhere without an eviction: the policy's choice over every pod (evict y on B).
    full = Host("a2", 10 * MiB, (Resident("x", 9 * MiB, last_used_at=100.0),))
    assert _spread(2 * MiB, (has_m, "A"), (full, "A"), (idle, "B")) == PlaceOn("b1", ("y",))
    # Unscheduled pods (no node yet) count as apart.
    assert _spread(2 * MiB, (has_m, "A"), (same_node, "A"), (other_node, None)) == PlaceOn("b1")


def test_a_pods_node_is_its_binding() -> None:
    assert node_of({"spec": {"nodeName": "n1"}}) == "n1"
    assert node_of({"spec": {}}) is None and node_of({}) is None


def test_the_status_and_the_routing_read_live_bookings_only() -> None:
    live = _pod("b", PodLoad(10 * MiB, {"m": 2 * MiB, "n": MiB}))
    live["status"] = {"podIP": "10.0.0.9"}
    going = _pod("a", PodLoad(10 * MiB, {"m": MiB}))
    going["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    bad = {"metadata": {"name": "c", "annotations": {ANNOTATION_SHARED_LOAD: "{"}}}
    plain = _pod("d", None)
    (status,) = shared_status([going, live, bad, plain], 8000)
    assert (status.id, status.url, status.used_bytes, status.models) == (
        "b", "http://10.0.0.9:8000", 3 * MiB, ("m", "n"),
    )  # fmt: skip
    assert booked_models(live) == {"m", "n"}
    assert booked_models(going) == booked_models(bad) == booked_models(plain) == frozenset()
