"""A shared runtime pod's budget and what is booked on it: the `thaw.dev/shared-load` annotation,
read, changed and written as a patch conditional on the pod's resourceVersion: pure.

    thaw.dev/shared-load: {"budget_bytes": N, "models": {"bert": 123456, ...}, "class": "gpu"}

`class` is the placement class of the pool the pod came from (absent: `default`): a shared
model is placed only on shared pods of its own class. The annotation is the booking itself:
the bytes each model loaded (or being loaded) on the pod costs of its budget. A booking is
one JSON merge patch carrying the `resourceVersion` the placer read (as
`pod_claim.claim_patch` does), so of two activators booking room on one pod from the same
read, exactly one wins; the other gets 409 Conflict, reads the pod again and places again
(`shared_pods`). A pod deleted frees its room with it: no collector, no second object to
watch (docs/decisions/0022-shared-placement-on-kubernetes.md).

`host_of` turns a pod and what the activator knows of each model's load (`ModelUse`) into the
`placement.Host` the shared placement policy decides on: the same policy as the local scaler's.
`place_spread` adds what only pods have, nodes: a model's replicas go to pods on different
nodes when that costs no eviction (the policy already puts them in different pods).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from activator.scaler.backend import SharedReplicaStatus
from activator.scaler.kube_config import DEFAULT_CLASS, is_class_name
from activator.scaler.kubernetes.pod_state import (
    Pod,
    annotation,
    is_deleting,
    is_finished,
    name_of,
    runtime_url,
)
from activator.scaler.placement import Host, NewHost, PlaceOn, Resident, place

__all__ = [
    "ANNOTATION_SHARED_LOAD",
    "ModelUse",
    "PodLoad",
    "booked_models",
    "booking_patch",
    "host_of",
    "load_of",
    "node_of",
    "place_spread",
    "shared_status",
]

ANNOTATION_SHARED_LOAD = "thaw.dev/shared-load"
_MAX_TEXT = 64 * 1024  # an annotation's value this long is refused, not parsed


@dataclass(frozen=True)
class ModelUse:
    """What the placer knows of one model's load (summed over the activators): requests in
    flight on this pod, held for any replica, and its last request on its monotonic clock."""

    in_flight: int = 0
    held: int = 0
    last_used_at: float = 0.0
    pinned: bool = False


@dataclass(frozen=True)
class PodLoad:
    """A shared pod's budget, the bytes booked on it per model, and its placement class."""

    budget_bytes: int
    models: Mapping[str, int] = field(default_factory=dict)
    placement_class: str = DEFAULT_CLASS

    @property
    def used_bytes(self) -> int:
        return sum(self.models.values())

    def booked(self, model: str, nbytes: int, *, evict: Iterable[str] = ()) -> PodLoad:
        """This load with `evict` gone and `model` booked for `nbytes`."""
        if nbytes < 0:
            raise ValueError(f"`nbytes` = {nbytes}, must be >= 0")
        gone = set(evict)
        models = {m: b for m, b in self.models.items() if m not in gone}
        models[model] = nbytes
        return replace(self, models=models)

    def without(self, model: str) -> PodLoad:
        """This load with `model` unbooked (unloaded, evicted, scaled to zero)."""
        return replace(self, models={m: b for m, b in self.models.items() if m != model})

    def to_text(self) -> str:
        doc: dict[str, object] = {
            "budget_bytes": self.budget_bytes,
            "models": dict(sorted(self.models.items())),
        }
        if self.placement_class != DEFAULT_CLASS:  # absent: the default (older bookings too)
            doc["class"] = self.placement_class
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_text(cls, text: str) -> PodLoad:
        """Parse the annotation; ValueError naming what does not fit."""
        if len(text) > _MAX_TEXT:
            raise ValueError(f"{ANNOTATION_SHARED_LOAD}: longer than {_MAX_TEXT} characters")
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{ANNOTATION_SHARED_LOAD}: not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ValueError(f"{ANNOTATION_SHARED_LOAD}: must be a JSON object")
        budget = _count(doc.get("budget_bytes"), "budget_bytes")
        models = doc.get("models", {})
        if not isinstance(models, dict):
            raise ValueError(f"{ANNOTATION_SHARED_LOAD}: 'models' must be a JSON object")
        placement_class = doc.get("class", DEFAULT_CLASS)
        if not isinstance(placement_class, str) or not is_class_name(placement_class):
            raise ValueError(
                f"{ANNOTATION_SHARED_LOAD}: 'class' must be a placement class name (a DNS "
                f"label), not {placement_class!r:.40}"
            )
        counts = {str(m): _count(b, f"models.{m}") for m, b in models.items()}
        return cls(budget, counts, placement_class)


def _count(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(
            f"{ANNOTATION_SHARED_LOAD}: '{what}' must be a non-negative integer, not {value!r:.40}"
        )
    return value


def load_of(pod: Pod) -> PodLoad | None:
    """The pod's booking, or None when it does not share (no annotation). A malformed one
    raises ValueError: the caller leaves such a pod alone rather than over-book it."""
    text = annotation(pod, ANNOTATION_SHARED_LOAD)
    return None if text is None else PodLoad.from_text(text)


def booking_patch(pod: Pod, load: PodLoad) -> dict[str, Any]:
    """The merge patch that writes `load` on `pod`, valid only at the resourceVersion read
    (409 Conflict when anyone changed the pod since)."""
    return {
        "metadata": {
            "resourceVersion": pod["metadata"]["resourceVersion"],
            "annotations": {ANNOTATION_SHARED_LOAD: load.to_text()},
        }
    }


def host_of(
    pod: Pod,
    load: PodLoad,
    use: Mapping[str, ModelUse],
    *,
    now: float,
    empty_since: float | None = None,
) -> Host:
    """The placement policy's view of a shared pod. A booked model the placer knows nothing
    of (another activator's load still on its way, a model being loaded) counts as used just
    now: it is never evicted on a guess."""
    residents = tuple(
        _resident(model, nbytes, use.get(model), now)
        for model, nbytes in sorted(load.models.items())
    )
    return Host(
        id=name_of(pod),
        budget_bytes=load.budget_bytes,
        residents=residents,
        empty_since=None if residents else empty_since,
    )


def _resident(model: str, nbytes: int, use: ModelUse | None, now: float) -> Resident:
    if use is None:
        return Resident(model, nbytes, last_used_at=now)
    return Resident(
        model,
        nbytes,
        in_flight=use.in_flight,
        held=use.held,
        last_used_at=use.last_used_at,
        pinned=use.pinned,
    )


def node_of(pod: Pod) -> str | None:
    """The node the pod is bound to (None while unscheduled)."""
    node = (pod.get("spec") or {}).get("nodeName")
    return node if isinstance(node, str) and node else None


def place_spread(
    model: str,
    need_bytes: int,
    hosts: Sequence[tuple[Host, str | None]],
    *,
    now: float,
    grace_s: float,
    budget_bytes: int,
) -> PlaceOn | NewHost:
    """`placement.place` over (host, its node) pairs, preferring a pod on a node where no pod
    holds `model` yet when one has room without evicting anything; otherwise the policy's
    choice over every pod (a node's second replica of a model beats evicting another model,
    and beats a new pod)."""
    crowded = {node for host, node in hosts if node is not None and host.holds(model)}
    apart = [host for host, node in hosts if node not in crowded]
    every = [host for host, _node in hosts]
    if len(apart) < len(every):
        first = place(model, need_bytes, apart, now=now, grace_s=grace_s, budget_bytes=budget_bytes)
        if isinstance(first, PlaceOn) and not first.evict:
            return first
    return place(model, need_bytes, every, now=now, grace_s=grace_s, budget_bytes=budget_bytes)


def booked_models(pod: Pod) -> frozenset[str]:
    """The models booked on a live pod (none: not shared, deleting, finished, or a malformed
    booking)."""
    if is_deleting(pod) or is_finished(pod):
        return frozenset()
    try:
        load = load_of(pod)
    except ValueError:
        return frozenset()
    return frozenset(load.models) if load is not None else frozenset()


def shared_status(pods: Iterable[Pod], runtime_port: int | None) -> tuple[SharedReplicaStatus, ...]:
    """Every live shared pod as `thaw status` shows a shared replica, by name."""
    found = []
    for pod in pods:
        try:
            load = load_of(pod)
        except ValueError:
            continue
        if load is None or is_deleting(pod) or is_finished(pod):
            continue
        found.append(
            SharedReplicaStatus(
                id=name_of(pod),
                url=runtime_url(pod, runtime_port) or "",
                budget_bytes=load.budget_bytes,
                used_bytes=load.used_bytes,
                models=tuple(sorted(load.models)),
            )
        )
    return tuple(sorted(found, key=lambda r: r.id))
