"""One model behind the activator: its request path, replicas and scaling.

`model_endpoint` is the façade; its parts sit below it (an import-linter contract).

    model_endpoint     the façade over one model's request path, replicas and scaling
    admission          a slot on a ready replica, or a place in the held queue
    held_queue         bounded FIFO of requests held while no replica slot is free
    breaker            per-replica concurrency limit
    shared_limit       a shared replica's concurrency limit, over all its models
    balancer           replica choice: power of two random choices
    replica            one routable replica: where, its breaker, its drain state
    replica_lifecycle  start, watch, drain and stop replicas through the scaler
    reconciler         the autoscaler's Decision made real
    autoscaler         Knative-KPA-style scaling policy: pure, clock-injected
    concurrency        time-weighted observed concurrency, sampled per tick
    cold_start         a cold start: how many replicas, and how long it took
    direct_load        which replica takes the next direct connection
    sequence_routes    which replica each live sequence is bound to
    replica_stats      Triton statistics of a model, monotonic over its replicas
    replica_metrics    the replicas' Prometheus series as one

Exports `ModelEndpoint`, `Autoscaler` and `Decision`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from activator.endpoint.autoscaler import Autoscaler, Decision
    from activator.endpoint.model_endpoint import ModelEndpoint

__all__ = ["Autoscaler", "Decision", "ModelEndpoint"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "Autoscaler": "activator.endpoint.autoscaler",
    "Decision": "activator.endpoint.autoscaler",
    "ModelEndpoint": "activator.endpoint.model_endpoint",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
