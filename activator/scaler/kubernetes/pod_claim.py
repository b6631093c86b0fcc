"""The claim protocol's pure parts: which pool pods to try, and the objects a claim writes.

A claim is one JSON merge patch on a ready pool pod that carries the `resourceVersion` the
claimer saw. The API server applies it only if the pod has not changed since, so of two
activators racing for one pod exactly one wins; the other gets 409 Conflict and tries its next
candidate. The patch adds the model's labels and annotations (pod_state); a pod with them is
no candidate any more. It keeps the pool selector's labels while the model loads, so the
pool's ReplicaSet starts no replacement then (as the local pool defers its refill: a pod
starting beside a restore would take the CPU, the disk and the page cache the cold start
needs). The `serving` mark (`serving_patch`) removes them: the ReplicaSet releases the pod and
starts its replacement, and the pool Deployment becomes the pod's owner. When no pool pod is
ready, a model pod is created from the pool Deployment's own pod template (`model_pod`): one
definition of a runtime pod.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from activator.scaler.kubernetes.pod_state import (
    ANNOTATION_CLAIMED_AT,
    ANNOTATION_CLAIMED_BY,
    ANNOTATION_MODEL,
    ANNOTATION_STATE,
    LABEL_FLEET,
    LABEL_MODEL,
    Pod,
    PodState,
    annotation,
    is_deleting,
    is_finished,
    is_ready,
    pod_ip,
)

__all__ = [
    "candidates",
    "claim_patch",
    "model_pod",
    "serving_patch",
    "state_patch",
    "utc_now_text",
]


DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
_LOADING_DELETION_COST = 1_000_000


def utc_now_text(now: datetime | None = None) -> str:
    """RFC 3339 UTC with microseconds (a Kubernetes MicroTime; fine for annotations too)."""
    now = now or datetime.now(UTC)
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def candidates(pool_pods: Iterable[Pod], rng: random.Random) -> tuple[list[Pod], list[Pod]]:
    """The pool pods worth a claim: (Ready ones, shuffled; running ones with an IP that are
    not Ready yet, to probe directly). Shuffled so racing activators rarely pick the same pod
    first; deleting, finished or claimed pods are never candidates."""
    ready: list[Pod] = []
    maybe: list[Pod] = []
    for pod in pool_pods:
        if is_deleting(pod) or is_finished(pod) or pod_ip(pod) is None:
            continue
        if annotation(pod, ANNOTATION_MODEL) is not None:
            continue  # claimed, still loading in the pool (claim_patch)
        (ready if is_ready(pod) else maybe).append(pod)
    rng.shuffle(ready)
    rng.shuffle(maybe)
    return ready, maybe


def claim_patch(
    pod: Pod,
    *,
    model: str,
    label: str,
    fleet: str,
    activator: str,
    now: str,
) -> dict[str, Any]:
    """The merge patch that claims `pod` for `model`, valid only at the resourceVersion seen
    (the pool's labels stay until `serving_patch`)."""
    labels = {LABEL_FLEET: fleet, LABEL_MODEL: label}
    annotations = _claim_annotations(model, activator, now)
    # While it loads in the pool, a scale-down of the pool takes any other pod first.
    annotations[DELETION_COST] = str(_LOADING_DELETION_COST)
    return {
        "metadata": {
            "resourceVersion": pod["metadata"]["resourceVersion"],
            "labels": labels,
            "annotations": annotations,
        }
    }


def state_patch(state: PodState) -> dict[str, Any]:
    """The merge patch that moves a model pod to `state` (no precondition: only the pod's
    owner writes it)."""
    return {"metadata": {"annotations": {ANNOTATION_STATE: state.value}}}


def serving_patch(*, pool_keys: Iterable[str], owners: list[dict[str, Any]]) -> dict[str, Any]:
    """The merge patch that marks a claimed pool pod `serving` and takes it out of its pool:
    the pool's labels go (its ReplicaSet releases it and starts a replacement) and the pool
    Deployment (`owners`) owns it from now on."""
    patch = state_patch(PodState.SERVING)
    patch["metadata"]["labels"] = dict.fromkeys(pool_keys)
    patch["metadata"]["ownerReferences"] = owners
    return patch


def model_pod(
    template: Mapping[str, Any],
    *,
    model: str,
    label: str,
    fleet: str,
    activator: str,
    pool_keys: Iterable[str],
    now: str,
) -> dict[str, Any]:
    """A pod for `model` made from the pool Deployment's pod template (`spec.template`),
    without the pool's labels (the pool's ReplicaSet must not adopt it)."""
    meta = copy.deepcopy(dict(template.get("metadata") or {}))
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in set(pool_keys)}
    labels.update({LABEL_FLEET: fleet, LABEL_MODEL: label})
    annotations = dict(meta.get("annotations") or {})
    annotations.update(_claim_annotations(model, activator, now))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{fleet}-{label}-"[:58].lower().replace("_", "-").replace(".", "-"),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": copy.deepcopy(dict(template.get("spec") or {})),
    }


def _claim_annotations(model: str, activator: str, now: str) -> dict[str, str]:
    return {
        ANNOTATION_MODEL: model,
        ANNOTATION_STATE: PodState.LOADING.value,
        ANNOTATION_CLAIMED_BY: activator,
        ANNOTATION_CLAIMED_AT: now,
    }
