"""The activator's Prometheus metrics, declared once, in one registry per app."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics"]

_COLD_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60)
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class Metrics:
    """Every activator metric; names are what dashboards and alerts use."""

    def __init__(self) -> None:
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
            "Cold start duration by phase: claim, restore, warmup, total",
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
        self.rejections = Counter(
            "thaw_activator_rejections_total",
            "Inference requests the activator answered itself, by reason",
            ["model", "reason"],
            registry=r,
        )
