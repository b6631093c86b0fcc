"""The activator's Prometheus metrics, declared once, in one registry per app."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from activator.errors import ActivatorError
from activator.scaler.backend import PoolStatus, SharedReplicaStatus
from thawserver.cache_counters import EvictionCounts, read_counts
from thawserver.gpu_metrics import GpuCollector, GpuReader, NvmlReader, bare_energy_header
from thawserver.host_metrics import HostCollector
from thawserver.metric_values import triton_values

if TYPE_CHECKING:
    from activator.observe.cost import CostFigures

__all__ = ["Metrics", "RequestCount"]

_COLD_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60)
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class Metrics:
    """Every activator metric; names are what dashboards and alerts use."""

    def __init__(
        self, *, host_gauges: bool = True, gpu_gauges: bool = True, gpu: GpuReader | None = None
    ) -> None:
        """`host_gauges`: Triton's `nv_cpu_*` gauges of this host (`--allow-cpu-metrics`);
        `gpu_gauges`: its GPUs' `nv_gpu_*` / `nv_energy_*` families (`--allow-gpu-metrics`),
        read by `gpu` (default: NVML; absent where NVML or a GPU is not)."""
        # Label children of the per-request metrics, by label values: `.labels()` validates
        # and locks on every call, which the request path should not pay for.
        self._latency: dict[tuple[str, str], Any] = {}
        self.registry = CollectorRegistry()
        r = self.registry
        # Triton's host gauges: the host the front door (and local replicas) run on.
        if host_gauges:
            r.register(HostCollector())
        if gpu_gauges:  # the GPUs this host's replicas use, as tritonserver reports its own
            r.register(GpuCollector(gpu if gpu is not None else NvmlReader()))
        self.replicas = Gauge(
            "thaw_model_replicas",
            "Replicas per model; state desired (autoscaler) or ready (routable)",
            ["model", "state"],
            registry=r,
        )
        self.model_state = Gauge(
            "thaw_model_state",
            "1 for the state a model is in (cold, waking, warm, draining, unavailable), else 0",
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
        self.first_token = Histogram(
            "thaw_time_to_first_token_seconds",
            "OpenAI requests: arrival to the replica's first answer bytes (a stream's first "
            "token), by whether the model had no ready replica on arrival (cold: true, false)",
            ["model", "cold"],
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
            "Replica start attempts by result (ok, failed, withdrawn: a follower's start "
            "nobody needed any more)",
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
        self.direct_moves = Counter(
            "thaw_direct_moves_total",
            "Kept-alive client connections the activator served that it closed after a "
            "complete response (Connection: close) because a replica of the model could take "
            "them now: the client reconnects and is handed off",
            ["model"],
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
        # The Kubernetes scaler backend (`--scaler kubernetes`).
        self.pod_claims = Counter(
            "thaw_kube_pod_claims_total",
            "Warm-pool pod claims by placement class and result: claimed, conflict (409: "
            "another activator won it), gone (404: deleted meanwhile)",
            ["model", "placement_class", "result"],
            registry=r,
        )
        self.pool_misses = Counter(
            "thaw_kube_pool_misses_total",
            "Replica starts that found no ready warm-pool pod and created a model pod "
            "directly (a slower, classic pod start), by the model's placement class",
            ["model", "placement_class"],
            registry=r,
        )
        self.waiting_for_node = Gauge(
            "thaw_kube_pods_waiting_for_node",
            "Model pods this activator started that no node can take yet (Pending, "
            "Unschedulable): their requests are held while a node is provisioned",
            ["model"],
            registry=r,
        )
        self.node_waits = Counter(
            "thaw_kube_node_waits_total",
            "Model pods that had to wait for a node, by how the wait ended: scheduled, "
            "timed_out (--node-provisioning-timeout-s)",
            ["model", "outcome"],
            registry=r,
        )
        self.api_retries = Counter(
            "thaw_kube_api_retries_total",
            "Kubernetes API calls or watches tried again after an error, by HTTP status "
            "(0: no answer)",
            ["status"],
            registry=r,
        )
        self.collected_pods = Counter(
            "thaw_kube_collected_pods_total",
            "Claimed pods the collection pass deleted, by reason (finished, unknown_model, "
            "orphaned)",
            ["reason"],
            registry=r,
        )
        self.scaling_leader = Gauge(
            "thaw_scaling_leader",
            "1 while this activator holds the scaling Lease (it claims and deletes pods)",
            registry=r,
        )
        self.peer_reports = Counter(
            "thaw_peer_reports_total",
            "Concurrency reports between activators: received, refused (not the leader), "
            "invalid, sent, send_failed, send_refused",
            ["result"],
            registry=r,
        )
        # The local scaler's warm pool (`--scaler local`) and the image caches.
        self.pool_processes = Gauge(
            "thaw_warm_pool_processes",
            "Warm-pool processes by state: target (the pool policy's size now), idle (ready "
            "to claim), starting",
            ["state"],
            registry=r,
        )
        self.pool_demand = Gauge(
            "thaw_warm_pool_demand",
            "Models woken within the pool policy's window (each keeps an idle process)",
            registry=r,
        )
        self.pool_idle_pss = Gauge(
            "thaw_warm_pool_idle_pss_bytes",
            "Proportional set size of each idle warm-pool process (slot 0 is claimed next), "
            "as last measured",
            ["slot"],
            registry=r,
        )
        self.fork_server_pss = Gauge(
            "thaw_fork_server_pss_bytes",
            "Proportional set size of the warm pool's fork server (0: none running)",
            registry=r,
        )
        self.pool_last_start = Gauge(
            "thaw_warm_pool_last_start_seconds",
            "Start -> ready of the last warm-pool process (with the fork server: fork -> ready)",
            registry=r,
        )
        self.pool_starts = Counter(
            "thaw_warm_pool_starts_total", "Warm-pool processes started and ready", registry=r
        )
        self._pool_starts_seen = 0
        self._caches: _CacheCollector | None = None
        # Shared placement (activator.scaler.placement): counters kept across replicas.
        self.shared_evictions = Counter(
            "thaw_shared_evictions_total",
            "Times a shared model was unloaded from its shared replica to make room for another "
            "(its image stays in the host-memory tier)",
            ["model"],
            registry=r,
        )
        self.shared_loads = Counter(
            "thaw_shared_loads_total",
            "Loads of a shared model into a shared replica by where its weights came from: host "
            "(host-memory tier: a re-wake after an eviction or scale to zero), cache (node "
            "cache), store, files (no image)",
            ["model", "source"],
            registry=r,
        )

    def exposition(self) -> bytes:
        """The Prometheus text exposition (format 0.0.4) of the activator's own families."""
        return triton_values(bare_energy_header(generate_latest(self.registry)))

    def report_cost(self, source: Callable[[], Iterable[CostFigures]]) -> None:
        """Export every model's cost accounting (activator.observe.cost), read from `source` at
        scrape time: `thaw_replica_seconds_total`, `thaw_gpu_seconds_total`, ..."""
        self.registry.register(_CostCollector(source))

    def report_shared(self, source: Callable[[], Iterable[SharedReplicaStatus]]) -> None:
        """Export the shared replicas, read from `source` at scrape time: each one's budget
        and bytes used, and which models live on it."""
        self.registry.register(_SharedCollector(source))

    def observe_pool(self, pool: PoolStatus) -> None:
        """Copy the scaler's warm-pool report into the pool metrics."""
        self.pool_processes.labels("target").set(pool.size)
        self.pool_processes.labels("idle").set(pool.ready)
        self.pool_processes.labels("starting").set(pool.starting)
        self.pool_demand.set(pool.demand)
        self.pool_idle_pss.clear()
        for slot, nbytes in enumerate(pool.idle_pss_bytes):
            self.pool_idle_pss.labels(str(slot)).set(nbytes)
        self.fork_server_pss.set(pool.server_pss_bytes or 0)
        if pool.last_start_s is not None:
            self.pool_last_start.set(pool.last_start_s)
        if pool.starts > self._pool_starts_seen:
            self.pool_starts.inc(pool.starts - self._pool_starts_seen)
            self._pool_starts_seen = pool.starts

    def watch_caches(self, node_dir: Path | None, host_dir: Path | None) -> None:
        """Report the image caches' evictions and sizes (as of the last `refresh_caches`)."""
        self._caches = _CacheCollector(node_dir, host_dir)
        self.registry.register(self._caches)

    def refresh_caches(self) -> None:
        """Re-read the caches' counters and sizes: blocking file reads, call it in a thread."""
        if self._caches is not None:
            self._caches.refresh()

    def observe_request(self, model: str, code: str, seconds: float) -> None:
        """One inference request left the activator with HTTP status `code`."""
        child = self._latency.get((model, code))
        if child is None:
            child = self._latency[model, code] = self.request_latency.labels(model, code)
        child.observe(seconds)

    @contextmanager
    def counting(self, model: str) -> Iterator[RequestCount]:
        """Count the inference request handled inside: its latency and status when it leaves
        (500 unless the handler sets `code`), and an ActivatorError raised through it as a
        refusal of that status."""
        count = RequestCount(self, model)
        started = time.monotonic()
        try:
            yield count
        except ActivatorError as exc:
            count.refused(exc)
            raise
        finally:
            self.observe_request(model, str(count.code), time.monotonic() - started)


class RequestCount:
    """The HTTP status one inference request leaves the activator with (Metrics.counting)."""

    def __init__(self, metrics: Metrics, model: str) -> None:
        self._metrics = metrics
        self._model = model
        self.code = 500  # until the handler says otherwise: a bug leaves as 500

    def refused(self, exc: ActivatorError) -> None:
        """The request was refused with `exc` (counted by its kind)."""
        self.code = exc.status
        self._metrics.rejections.labels(self._model, type(exc).__name__).inc()


class _CacheCollector(Collector):
    """The node cache's and host-memory tier's evictions (counted in each cache directory by
    whichever replica evicted, thawserver.cache_counters) and the host tier's bytes now."""

    def __init__(self, node_dir: Path | None, host_dir: Path | None) -> None:
        self._dirs = {"node": node_dir, "host": host_dir}
        self._counts = {t: EvictionCounts() for t, d in self._dirs.items() if d is not None}
        self._host_bytes = 0

    def refresh(self) -> None:
        """Read the counters and the host tier's size (blocking: call it in a thread)."""
        self._counts = {t: read_counts(d) for t, d in self._dirs.items() if d is not None}
        host = self._dirs["host"]
        self._host_bytes = _directory_bytes(host) if host is not None else 0

    def collect(self) -> Iterator[Any]:
        evictions = CounterMetricFamily(
            "thaw_image_cache_evictions",
            "Entries evicted to fit a cache budget, by tier (node: chunks of --cache-max-bytes, "
            "host: images of --host-cache-bytes)",
            labels=["tier"],
        )
        evicted = CounterMetricFamily(
            "thaw_image_cache_evicted_bytes",
            "Bytes evicted to fit a cache budget, by tier",
            labels=["tier"],
        )
        for tier, counts in self._counts.items():
            evictions.add_metric([tier], counts.evictions)
            evicted.add_metric([tier], counts.evicted_bytes)
        yield evictions
        yield evicted
        if self._dirs["host"] is not None:
            size = GaugeMetricFamily(
                "thaw_host_cache_bytes", "Bytes held by the host-memory tier now"
            )
            size.add_metric([], self._host_bytes)
            yield size


def _directory_bytes(directory: Path) -> int:
    """Bytes of the regular files directly in `directory` (0 when it is gone)."""
    total = 0
    try:
        for entry in directory.iterdir():
            try:
                stat = entry.stat()
            except FileNotFoundError:
                continue
            total += stat.st_blocks * 512  # what the tmpfs holds, sparse gaps excluded
    except OSError:
        return 0
    return total


class _CostCollector:
    """The cost families, built at scrape time from the fleet's ledgers (activator.observe.cost)."""

    def __init__(self, source: Callable[[], Iterable[CostFigures]]) -> None:
        self._source = source

    def describe(self) -> list[Metric]:
        return []  # collected only when scraped (the ledgers exist with the fleet)

    def collect(self) -> Iterator[Metric]:
        figures = list(self._source())
        families: list[tuple[type, str, str, Callable[[CostFigures], float]]] = [
            (CounterMetricFamily, "thaw_replica_seconds",
             "Replica-seconds used: the integral of running replicas (starting, ready or "
             "draining) over time", lambda c: c.replica_seconds),
            (CounterMetricFamily, "thaw_gpu_seconds",
             "GPU-seconds used: replica-seconds x GPUs per replica", lambda c: c.gpu_seconds),
            (CounterMetricFamily, "thaw_idle_at_zero_seconds",
             "Seconds the model ran no replica at all", lambda c: c.idle_at_zero_s),
            (CounterMetricFamily, "thaw_always_on_replica_seconds",
             "Replica-seconds always-on replicas at the observed peak (min_replicas = peak) "
             "would have used", lambda c: c.always_on_replica_seconds),
            (GaugeMetricFamily, "thaw_saved_replica_seconds",
             "Always-on replica-seconds minus those used (scale to zero's saving)",
             lambda c: c.saved_replica_seconds),
            (GaugeMetricFamily, "thaw_saved_gpu_seconds",
             "Always-on GPU-seconds minus those used", lambda c: c.saved_gpu_seconds),
            (GaugeMetricFamily, "thaw_peak_replicas",
             "Most replicas ready at once since thaw up started", lambda c: c.peak_replicas),
            (GaugeMetricFamily, "thaw_gpus_per_replica",
             "GPUs one replica holds (KIND_GPU instance groups)", lambda c: c.gpus_per_replica),
        ]  # fmt: skip
        for kind, name, help_text, value in families:
            family = kind(name, help_text, labels=["model"])
            for c in figures:
                family.add_metric([c.model], value(c))
            yield family


class _SharedCollector:
    """The shared replicas' families, built at scrape time from the backend's report."""

    def __init__(self, source: Callable[[], Iterable[SharedReplicaStatus]]) -> None:
        self._source = source

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        replicas = list(self._source())
        sizes = GaugeMetricFamily(
            "thaw_shared_replica_bytes",
            "A shared replica's memory budget and the bytes its models use of it",
            labels=["replica", "kind"],
        )
        placed = GaugeMetricFamily(
            "thaw_shared_model_placement",
            "1 for each model and the shared replica it is loaded on",
            labels=["model", "replica"],
        )
        for replica in replicas:
            sizes.add_metric([replica.id, "budget"], replica.budget_bytes)
            sizes.add_metric([replica.id, "used"], replica.used_bytes)
            for model in replica.models:
                placed.add_metric([model, replica.id], 1)
        yield sizes
        yield placed
