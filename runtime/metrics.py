"""Prometheus metrics with Triton's `nv_*` names, plus model-load metrics, per server."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import psutil
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

from runtime.stats import FailureReason, ModelStats, StatsBook

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

PendingFn = Callable[[], dict[tuple[str, str], int]]

# (name, help, value of a ModelStats) for Triton's per-model counters.
_COUNTERS: tuple[tuple[str, str, Callable[[ModelStats], float]], ...] = (
    ("nv_inference_request_success", "Number of successful inference requests, all batch sizes",
     lambda s: s.success.count),
    ("nv_inference_count", "Number of inferences performed (does not include cached requests)",
     lambda s: s.inference_count),
    ("nv_inference_exec_count", "Number of model executions performed",
     lambda s: s.execution_count),
    ("nv_inference_request_duration_us", "Cumulative inference request duration in microseconds",
     lambda s: s.success.ns // 1000),
    ("nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds",
     lambda s: s.queue.ns // 1000),
    ("nv_inference_compute_input_duration_us",
     "Cumulative compute input duration in microseconds", lambda s: s.compute_input.ns // 1000),
    ("nv_inference_compute_infer_duration_us",
     "Cumulative compute inference duration in microseconds",
     lambda s: s.compute_infer.ns // 1000),
    ("nv_inference_compute_output_duration_us",
     "Cumulative inference compute output duration in microseconds",
     lambda s: s.compute_output.ns // 1000),
)  # fmt: skip


def _labels(pairs: dict[str, str]) -> str:
    inner = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in pairs.items()
    )
    return "{" + inner + "}"


class Metrics:
    """One server's metrics; `exposition()` renders the `/metrics` body."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._book: StatsBook | None = None
        self._pending: PendingFn | None = None
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
        psutil.cpu_percent(interval=None)  # prime: the first reading is since this call

    def bind(self, book: StatsBook, pending: PendingFn) -> None:
        """Attach the statistics the `nv_*` metrics are read from at scrape time."""
        self._book = book
        self._pending = pending

    def record_load(self, model: str, version: str, seconds: float, *, restored: bool) -> None:
        self.load_duration.labels(model, version).set(seconds)
        self.restored.labels(model, version).set(1 if restored else 0)

    def record_load_failure(self, model: str) -> None:
        self.load_failures.labels(model).inc()

    def forget(self, model: str, version: str) -> None:
        """Drop a version's load gauges after it is unloaded."""
        for gauge in (self.load_duration, self.restored):
            with contextlib.suppress(KeyError):
                gauge.remove(model, version)

    def exposition(self) -> bytes:
        """The Prometheus text exposition (format 0.0.4) of every metric."""
        lines = list(self._triton_lines())
        return ("\n".join(lines) + "\n").encode() + generate_latest(self.registry)

    def _triton_lines(self) -> Iterator[str]:
        rows = self._book.items() if self._book is not None else []
        yield "# HELP nv_inference_request_failure Number of failed inference requests"
        yield "# TYPE nv_inference_request_failure counter"
        for (model, version), stats in rows:
            for reason in FailureReason:
                labels = _labels({"model": model, "reason": reason.value, "version": version})
                yield f"nv_inference_request_failure{labels} {stats.failures[reason]}"
        for name, help_text, value in _COUNTERS:
            yield f"# HELP {name} {help_text}"
            yield f"# TYPE {name} counter"
            for (model, version), stats in rows:
                yield f"{name}{_labels({'model': model, 'version': version})} {value(stats)}"
        yield from self._pending_lines()
        yield from self._cpu_lines()

    def _pending_lines(self) -> Iterator[str]:
        pending = self._pending() if self._pending is not None else {}
        yield "# HELP nv_inference_pending_request_count Instantaneous number of pending requests"
        yield "# TYPE nv_inference_pending_request_count gauge"
        for (model, version), count in sorted(pending.items()):
            labels = _labels({"model": model, "version": version})
            yield f"nv_inference_pending_request_count{labels} {count}"

    def _cpu_lines(self) -> Iterator[str]:
        memory = psutil.virtual_memory()
        values = (
            ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]",
             psutil.cpu_percent(interval=None) / 100.0),
            ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", memory.total),
            ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes",
             memory.total - memory.available),
        )  # fmt: skip
        for name, help_text, value in values:
            yield f"# HELP {name} {help_text}"
            yield f"# TYPE {name} gauge"
            yield f"{name} {value}"
