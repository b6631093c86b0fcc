"""The activator's Prometheus metrics, declared once, in one registry per app."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics"]

_COLD_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60)
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class Metrics:
    """Every activator metric; names are what dashboards and alerts use."""

    def __init__(self) -> None:
        # Label children of the per-request metrics, by label values: `.labels()` validates
        # and locks on every call, which the request path should not pay for.
        self._latency: dict[tuple[str, str], Any] = {}
        self.registry = CollectorRegistry()
        r = self.registry
        self.replicas = Gauge(
            "thaw_model_replicas",
            "Replicas per model; state desired (autoscaler) or ready (routable)",
            ["model", "state"],
            registry=r,
        )
        self.held = Gauge(
            "thaw_held_requests", "Requests held waiting for a replica", ["model"], registry=r
        )
        self.cold_start = Histogram(
            "thaw_cold_start_seconds",
            "Cold start duration by phase: claim, restore, model_warmup, warmup, total",
            ["model", "phase"],
            buckets=_COLD_BUCKETS,
            registry=r,
        )
        self.scale_decisions = Counter(
            "thaw_scale_decisions_total",
            "Changes of a model's desired replica count, by direction (up, down)",
            ["model", "direction"],
            registry=r,
        )
        self.replica_starts = Counter(
            "thaw_replica_starts_total",
            "Replica start attempts by result (ok, failed)",
            ["model", "result"],
            registry=r,
        )
        self.request_latency = Histogram(
            "thaw_activator_request_duration_seconds",
            "Inference request time in the activator (held + proxied), by HTTP status code",
            ["model", "code"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.direct_connections = Gauge(
            "thaw_direct_connections",
            "Client connections handed to a model's replicas and still open (last reports)",
            ["model"],
            registry=r,
        )
        self.handoffs = Counter(
            "thaw_handoffs_total",
            "New client connections by where they went: handed_off to a replica, or the "
            "reason the activator served them itself",
            ["model", "result"],
            registry=r,
        )
        self.rejections = Counter(
            "thaw_activator_rejections_total",
            "Inference requests the activator answered itself, by reason",
            ["model", "reason"],
            registry=r,
        )
        self.direct_fallbacks = Counter(
            "thaw_direct_fallbacks_total",
            "Handed-off connections the activator dealt with after all: returned (the replica "
            "did not take it: served here), or, of a replica that died, bad_gateway (a request "
            "had begun: 502 JSON), aborted (a response was being written: reset), taken_back "
            "(idle: served here)",
            ["model", "outcome"],
            registry=r,
        )

    def observe_request(self, model: str, code: str, seconds: float) -> None:
        """One inference request left the activator with HTTP status `code`."""
        child = self._latency.get((model, code))
        if child is None:
            child = self._latency[model, code] = self.request_latency.labels(model, code)
        child.observe(seconds)
