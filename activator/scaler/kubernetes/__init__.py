"""The Kubernetes scaler backend (`--scaler kubernetes`): replicas as runtime pods.

    backend          the ScalerBackend whose replicas are runtime pods
    attachments      the pods this activator routes to, and when one of them is lost
    api              the Kubernetes API as the backend uses it, errors translated
    pod_starter      bring one pod up: claim a warm pod or create one, load, mark
    pod_informer     a cache of the pods a selector matches (list + watch)
    pod_state        what the backend reads from a pod object
    pod_claim        the claim protocol's pure parts
    pod_collector    which claimed pods no model wants any more (pure)
    pod_budget       a shared pod's booking (`thaw.dev/shared-load`) and its patch (pure)
    pod_memory       a shared pod's budget capped by its memory limit (pure)
    shared_pods      the leader's shared placement: book with resourceVersion, evict, release
    shared_replicas  shared models' replicas on pods: claim or share, evict, stop, release
    shared_routing   where this activator routes shared models: start, follow, adopt bookings
    leader_election  the scaling leader's Lease, kept
    leader_lease     the Lease record and the pure election policy
    follower_start   a follower's replica start with no pod to attach (pure)
    follower_wait    a follower's replica start as one loop: look, decide, wait
    peer_reports     followers tell the scaling leader their load
    peer_load        the other activators' concurrency (pure bookkeeping)
    load_state_lease  explicit mode's load state, the fleet's: its Lease read and written
    load_state_doc    that state's document, its merge and which re-read is adopted (pure)
    model_labels     a model's name as a Kubernetes label value
    backoff          how long to wait before retrying an API call (pure)

Exports `KubernetesBackend`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from activator.scaler.kubernetes.backend import KubernetesBackend

__all__ = ["KubernetesBackend"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "KubernetesBackend": "activator.scaler.kubernetes.backend",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
