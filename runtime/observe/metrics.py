"""Prometheus metrics with Triton's `nv_*` names, plus model-load metrics, per server.

Triton's metrics are read from the statistics (runtime.observe.stats) by a custom collector at
scrape time, so a request pays nothing for them; prometheus_client writes the exposition text.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator

import psutil
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from runtime.observe.custom_metrics import CustomMetrics, MetricKind
from runtime.observe.latency_summary import LatencyKind
from runtime.observe.stats import FailureReason, ModelStats, StatsBook
from thawserver.gpu_metrics import GpuReader, NvmlReader, bare_energy_header, gpu_families
from thawserver.host_metrics import HostCollector
from thawserver.metric_values import triton_values
from thawserver.metrics_config_flags import MetricsSettings
from thawwire import model_metrics

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

PendingFn = Callable[[], dict[tuple[str, str], int]]

# Triton's per-model counters (thawwire.model_metrics) and the value of a ModelStats of each.
_VALUES: dict[str, Callable[[ModelStats], float]] = {
    "nv_inference_request_success": lambda s: s.success.count,
    "nv_inference_count": lambda s: s.inference_count,
    "nv_inference_exec_count": lambda s: s.execution_count,
    "nv_inference_request_duration_us": lambda s: s.success.ns // 1000,
    "nv_inference_queue_duration_us": lambda s: s.queue.ns // 1000,
    "nv_inference_compute_input_duration_us": lambda s: s.compute_input.ns // 1000,
    "nv_inference_compute_infer_duration_us": lambda s: s.compute_infer.ns // 1000,
    "nv_inference_compute_output_duration_us": lambda s: s.compute_output.ns // 1000,
}
_COUNTERS = tuple((name, help_text, _VALUES[name]) for name, help_text in model_metrics.COUNTERS)
_FAILURE = model_metrics.FAILURE
# Triton's summaries (`--metrics-config summary_latencies=true`) and their HELP texts; the
# cache's only for a model that uses the cache.
_SUMMARIES = tuple((LatencyKind(name), help_text) for name, help_text in model_metrics.SUMMARIES)
_CACHE_SUMMARIES: tuple[tuple[LatencyKind, str], ...] = (
    (LatencyKind.CACHE_HIT, "Summary of cache hit counts/durations per model, in microseconds."),
    (LatencyKind.CACHE_MISS,
     "Summary of cache miss counts/durations per model, in microseconds."),
)  # fmt: skip


# Triton's per-model response cache counters, reported only for models that use the cache.
_CACHE_COUNTERS: tuple[tuple[str, str, Callable[[ModelStats], float]], ...] = (
    ("nv_cache_num_hits_per_model", "Number of cache hits per model",
     lambda s: s.cache_hit.count),
    ("nv_cache_hit_duration_per_model", "Total cache hit duration per model, in microseconds",
     lambda s: s.cache_hit.ns // 1000),
    ("nv_cache_num_misses_per_model", "Number of cache misses per model",
     lambda s: s.cache_miss.count),
    ("nv_cache_miss_duration_per_model",
     "Total cache miss (insert+lookup) duration per model, in microseconds",
     lambda s: s.cache_miss.ns // 1000),
)  # fmt: skip

# Triton (prometheus-cpp) names its counters without prometheus_client's `_total` suffix, and
# clients match these names exactly. prometheus_client writes a counter family's HELP and TYPE
# lines as `<name>_total` (its samples keep the names we give them), so those two lines are
# renamed back, for these names only. Anchored at a line start: a label value or HELP text
# cannot start a line (prometheus_client escapes their newlines).
_TRITON_COUNTER_HEADER = re.compile(
    rb"^# (HELP|TYPE) ("
    + b"|".join(
        name.encode() for name in (_FAILURE[0], *(c[0] for c in (*_COUNTERS, *_CACHE_COUNTERS)))
    )
    + rb")_total ",
    re.MULTILINE,
)


class TritonCollector:
    """Triton's per-model `nv_*` families, its CPU gauges and (where NVML is) its GPU
    families, built at scrape time."""

    def __init__(self, gpu: GpuReader, settings: MetricsSettings) -> None:
        self._book: StatsBook | None = None
        self._pending: PendingFn | None = None
        self._gpu = gpu
        self._settings = settings
        self._host = HostCollector()

    def bind(self, book: StatsBook, pending: PendingFn) -> None:
        self._book = book
        self._pending = pending

    def collect(self) -> Iterator[Metric]:
        # `Metric(..., "counter")`, not CounterMetricFamily: that one names every sample
        # `<name>_total`, and Triton's samples have the bare name.
        rows = self._book.items() if self._book is not None else []
        failure = Metric(*_FAILURE, "counter")
        for (model, version), stats in rows:
            for reason in FailureReason:
                labels = {"model": model, "reason": reason.value, "version": version}
                failure.add_sample(_FAILURE[0], labels, stats.failures[reason])
        yield failure
        counters = self._settings.counter_latencies
        for name, help_text, value in _COUNTERS:
            if not counters and name in model_metrics.LATENCY_COUNTERS:
                continue
            family = Metric(name, help_text, "counter")
            for (model, version), stats in rows:
                family.add_sample(name, {"model": model, "version": version}, value(stats))
            yield family
        cached = [(key, stats) for key, stats in rows if stats.cache_enabled]
        if cached and counters:
            for name, help_text, value in _CACHE_COUNTERS:
                family = Metric(name, help_text, "counter")
                for (model, version), stats in cached:
                    family.add_sample(name, {"model": model, "version": version}, value(stats))
                yield family
        if self._settings.summary_latencies:
            yield from _summary_families(rows, self._settings.summary_quantiles)
        yield self._pending_family()
        if self._settings.cpu_gauges:
            yield from self._host.collect()
        if self._settings.gpu_gauges:
            yield from gpu_families(self._gpu.samples())

    def _pending_family(self) -> GaugeMetricFamily:
        pending = self._pending() if self._pending is not None else {}
        family = GaugeMetricFamily(*model_metrics.PENDING, labels=["model", "version"])
        for (model, version), count in sorted(pending.items()):
            family.add_metric([model, version], count)
        return family


def _summary_families(
    rows: list[tuple[tuple[str, str], ModelStats]], quantiles: tuple[tuple[float, float], ...]
) -> Iterator[Metric]:
    """Triton's latency summaries: per version, each quantile (a `quantile` label), `_sum` and
    `_count`. The cache's two only for versions that use the cache, as Triton."""
    now_s = time.monotonic()
    for kinds, cache_only in ((_SUMMARIES, False), (_CACHE_SUMMARIES, True)):
        for kind, help_text in kinds:
            family = Metric(kind.value, help_text, "summary")
            for (model, version), stats in rows:
                if stats.latency is None or (cache_only and not stats.cache_enabled):
                    continue
                labels = {"model": model, "version": version}
                with stats.lock:
                    snap = stats.latency.snapshot(kind, quantiles, now_s=now_s)
                for quantile, value in snap.values:
                    label = model_metrics.quantile_label(quantile)
                    family.add_sample(kind.value, {**labels, "quantile": label}, value)
                family.add_sample(f"{kind.value}_sum", labels, snap.total)
                family.add_sample(f"{kind.value}_count", labels, snap.count)
            if family.samples:
                yield family


class CustomCollector:
    """Python models' custom families (pb_utils.MetricFamily), read at scrape time.

    Names are the model's own (a counter keeps its bare name, as Triton writes it)."""

    def __init__(self, custom: CustomMetrics) -> None:
        self._custom = custom

    def collect(self) -> Iterator[Metric]:
        for fam in self._custom.snapshot():
            if fam.kind == MetricKind.HISTOGRAM:
                family = Metric(fam.name, fam.description, "histogram")
                for s in fam.series:
                    bounds = [*(_le(b) for b in s.buckets), "+Inf"]
                    for bound, count in zip(bounds, s.cumulative, strict=True):
                        family.add_sample(f"{fam.name}_bucket", {**s.labels, "le": bound}, count)
                    family.add_sample(f"{fam.name}_count", s.labels, s.observations)
                    family.add_sample(f"{fam.name}_sum", s.labels, s.value)
            else:
                kind = "counter" if fam.kind == MetricKind.COUNTER else "gauge"
                family = Metric(fam.name, fam.description, kind)
                for s in fam.series:
                    family.add_sample(fam.name, s.labels, s.value)
            yield family

    def counter_names(self) -> list[str]:
        return [f.name for f in self._custom.snapshot() if f.kind == MetricKind.COUNTER]


def _le(bound: float) -> str:
    """A bucket bound as Triton's exposition (prometheus-cpp) writes it: `1`, `2.5`, `0.1`."""
    value = float(bound)
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


class ServerMemory:
    """`thaw_server_resident_memory_bytes`: this server's resident memory with its child
    processes' (Python-backend instances run in their own), read at scrape time; a value
    that only grows is the leak operators page on (deploy/prometheus/thaw-alerts.yaml)."""

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        total = 0
        me = psutil.Process()  # here, not at start-up: psutil reads /proc to make one
        for process in (me, *me.children(recursive=True)):
            with contextlib.suppress(psutil.Error):  # a child that ended meanwhile
                total += process.memory_info().rss
        yield GaugeMetricFamily(
            "thaw_server_resident_memory_bytes",
            "Resident memory of this server and its child processes, in bytes",
            value=total,
        )


class Metrics:
    """One server's metrics; `exposition()` renders the `/metrics` body. `gpu` reads the GPUs
    for Triton's `nv_gpu_*` families (default: NVML, absent where NVML is not); `settings`:
    `--metrics-config`'s latency counters and summaries."""

    def __init__(
        self, *, gpu: GpuReader | None = None, settings: MetricsSettings | None = None
    ) -> None:
        self.registry = CollectorRegistry()
        self.settings = settings if settings is not None else MetricsSettings()
        gpu_reader = gpu if gpu is not None else NvmlReader()
        self._triton = TritonCollector(gpu_reader, self.settings)
        self.registry.register(self._triton)  # first: Triton's families lead the page
        # Python models' pb_utils.MetricFamily series, exported beside Triton's.
        self.custom = CustomMetrics()
        self._custom = CustomCollector(self.custom)
        self.registry.register(self._custom)
        self.registry.register(ServerMemory())
        self.load_duration = Gauge(
            "thaw_model_load_duration_seconds",
            "Seconds the last load of a model version took",
            ["model", "version"],
            registry=self.registry,
        )
        self.load_failures = Counter(
            "thaw_model_load_failures",
            "Model loads that failed",
            ["model"],
            registry=self.registry,
        )
        self.restored = Gauge(
            "thaw_model_restored_from_snapshot",
            "1 if the loaded model version was restored from a snapshot image, else 0",
            ["model", "version"],
            registry=self.registry,
        )
        self.warmup_duration = Gauge(
            "thaw_model_warmup_duration_seconds",
            "Seconds the config's model_warmup samples took at the last load of a version",
            ["model", "version"],
            registry=self.registry,
        )
        self.restore_failures = Counter(
            "thaw_restore_failures",
            "Snapshot restores that failed, by exception class (the model then loaded its "
            "files, or, for an error the snapshotter does not report, failed to load)",
            ["model", "reason"],
            registry=self.registry,
        )
        # Counters, like load failures: kept after an unload (a rate needs them).
        self.loads = Counter(
            "thaw_model_loads",
            "Model version loads by where the weights came from: host (memory), cache "
            "(node-local image cache), store (fetched from the image store) or files (no "
            "usable image: a classic load); the image cache's hit ratio is (host + cache) / "
            "(host + cache + store)",
            ["model", "source"],
            registry=self.registry,
        )
        self.device_fallbacks = Counter(
            "thaw_device_fallbacks",
            'Model instances (or, with model="", the server\'s CUDA warm-up) that run elsewhere '
            "than asked, by reason: no_cuda, no_onnxruntime_cuda, no_tensorrt",
            ["model", "reason"],
            registry=self.registry,
        )
        self.device_oom = Counter(
            "thaw_device_out_of_memory",
            "Loads that failed because the GPU had no room (VRAM check or CUDA out of memory)",
            ["model", "device"],
            registry=self.registry,
        )
        self.cuda_pool_bytes = Gauge(
            "thaw_cuda_memory_pool_bytes",
            "Device memory reserved at warm-up (--cuda-memory-pool-byte-size), per GPU",
            ["gpu"],
            registry=self.registry,
        )
        psutil.cpu_percent(interval=None)  # prime: the first reading is since this call

    def bind(self, book: StatsBook, pending: PendingFn) -> None:
        """Attach the statistics the `nv_*` metrics are read from at scrape time."""
        self._triton.bind(book, pending)

    def record_load(
        self, model: str, version: str, seconds: float, *, restored: bool, source: str = "files"
    ) -> None:
        """A version loaded; `source` is where a restored image's bytes came from."""
        self.load_duration.labels(model, version).set(seconds)
        self.restored.labels(model, version).set(1 if restored else 0)
        self.loads.labels(model, source if restored else "files").inc()

    def record_warmup(self, model: str, version: str, seconds: float) -> None:
        self.warmup_duration.labels(model, version).set(seconds)

    def record_load_failure(self, model: str) -> None:
        self.load_failures.labels(model).inc()

    def record_restore_failure(self, model: str, reason: str) -> None:
        self.restore_failures.labels(model, reason).inc()

    def record_device_fallback(self, model: str, reason: str) -> None:
        self.device_fallbacks.labels(model, reason).inc()

    def record_device_oom(self, model: str, device: str) -> None:
        self.device_oom.labels(model, device).inc()

    def forget(self, model: str, version: str) -> None:
        """Drop a version's load gauges after it is unloaded."""
        for gauge in (self.load_duration, self.restored, self.warmup_duration):
            with contextlib.suppress(KeyError):
                gauge.remove(model, version)

    def exposition(self) -> bytes:
        """The Prometheus text exposition (format 0.0.4) of every metric."""
        text = _TRITON_COUNTER_HEADER.sub(rb"# \1 \2 ", generate_latest(self.registry))
        text = bare_energy_header(text)
        counters = self._custom.counter_names()
        if counters:  # custom counters keep their bare names in HELP/TYPE too, as Triton's
            pattern = re.compile(
                rb"^# (HELP|TYPE) ("
                + b"|".join(re.escape(n.encode()) for n in counters)
                + rb")_total ",
                re.MULTILINE,
            )
            text = pattern.sub(rb"# \1 \2 ", text)
        return triton_values(text)  # `3`, `25276203008`: Triton's way of writing values
