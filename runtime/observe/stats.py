"""Per model-version inference statistics, as Triton's statistics extension reports."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from runtime.observe.latency_summary import LatencyKind, LatencySummaries

__all__ = ["Duration", "FailureReason", "ModelStats", "StatsBook"]


class FailureReason(StrEnum):
    """Triton's `nv_inference_request_failure` reasons."""

    REJECTED = "REJECTED"
    CANCELED = "CANCELED"
    BACKEND = "BACKEND"
    OTHER = "OTHER"


@dataclass(slots=True)
class Duration:
    """A count of events and their summed duration in nanoseconds."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def to_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class _BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


class ModelStats:
    """Counters of one loaded model version; updated from worker threads under one lock."""

    def __init__(self, *, summaries: bool = False) -> None:
        self.lock = threading.Lock()
        self.inference_count = 0  # inferences (batch items) that succeeded
        self.execution_count = 0  # model executions
        self.last_inference_ms = 0  # wall-clock ms of the last finished request
        self.success = Duration()
        self.fail = Duration()
        self.queue = Duration()
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()
        self.failures: dict[FailureReason, int] = dict.fromkeys(FailureReason, 0)
        self.batches: dict[int, _BatchStats] = {}
        self.cache_enabled = False  # the model uses the response cache (its nv_cache_* rows)
        self.cache_hit = Duration()  # lookups that found the answer, and their time
        self.cache_miss = Duration()  # lookups that did not, plus inserting the answer
        # Triton's latency summaries (`--metrics-config summary_latencies=true`), else None.
        self.latency = LatencySummaries() if summaries else None

    def record_execution(
        self,
        batch_size: int,
        outcomes: list[tuple[bool, int, int, int]],
        timings: tuple[int, int, int],
    ) -> None:
        """One model execution: per request (ok, inferences, queue_ns, request_ns); compute ns."""
        input_ns, infer_ns, output_ns = timings
        now_ms = time.time_ns() // 1_000_000
        with self.lock:
            self.execution_count += 1
            self.last_inference_ms = now_ms
            batch = self.batches.get(batch_size)
            if batch is None:
                batch = self.batches[batch_size] = _BatchStats()
            batch.compute_input.add(input_ns)
            batch.compute_infer.add(infer_ns)
            batch.compute_output.add(output_ns)
            n = len(outcomes)
            if n == 1 and outcomes[0][0]:  # the usual case: one request, and it succeeded
                _, inferences, queue_ns, request_ns = outcomes[0]
                self.inference_count += inferences
                self.success.add(request_ns)
                self.queue.add(queue_ns)
                self.compute_input.add(input_ns)
                self.compute_infer.add(infer_ns)
                self.compute_output.add(output_ns)
                self._observe(queue_ns, request_ns, (input_ns, infer_ns, output_ns))
                return
            for ok, inferences, queue_ns, request_ns in outcomes:
                if ok:
                    self.inference_count += inferences
                    self.success.add(request_ns)
                    self.queue.add(queue_ns)
                    # A batch's compute time is shared evenly by its requests (as Triton does).
                    self.compute_input.add(input_ns // n)
                    self.compute_infer.add(infer_ns // n)
                    self.compute_output.add(output_ns // n)
                    self._observe(
                        queue_ns, request_ns, (input_ns // n, infer_ns // n, output_ns // n)
                    )
                else:
                    self.fail.add(request_ns)
                    self.failures[FailureReason.BACKEND] += 1

    def record_summed(
        self,
        batch_size: int,
        count: int,
        request_ns: int,
        queue_ns: int,
        compute: tuple[int, int, int],
        last_ms: int,
    ) -> None:
        """`count` successful one-request executions of `batch_size` inferences each, summed
        (what the native front answered itself, runtime.process.front_control)."""
        input_ns, infer_ns, output_ns = compute
        with self.lock:
            self.execution_count += count
            self.inference_count += count * batch_size
            self.last_inference_ms = max(self.last_inference_ms, last_ms)
            batch = self.batches.get(batch_size)
            if batch is None:
                batch = self.batches[batch_size] = _BatchStats()
            for total, durations in (
                (input_ns, (batch.compute_input, self.compute_input)),
                (infer_ns, (batch.compute_infer, self.compute_infer)),
                (output_ns, (batch.compute_output, self.compute_output)),
            ):
                for duration in durations:
                    duration.add(total, count)
            self.success.add(request_ns, count)
            self.queue.add(queue_ns, count)

    def record_cache_hit(self, request_ns: int, hit_ns: int) -> None:
        """A request answered from the response cache: a success that executed nothing."""
        with self.lock:
            self.success.add(request_ns)
            self.queue.add(0)
            self.cache_hit.add(hit_ns)
            self.last_inference_ms = time.time_ns() // 1_000_000
            if self.latency is not None:
                now_s = time.monotonic()
                self.latency.observe(LatencyKind.REQUEST, request_ns / 1000, now_s=now_s)
                self.latency.observe(LatencyKind.CACHE_HIT, hit_ns / 1000, now_s=now_s)

    def record_cache_miss(self, miss_ns: int) -> None:
        """A lookup that missed, and the insertion of the computed answer (Triton adds that
        time to the request's duration too)."""
        with self.lock:
            self.cache_miss.add(miss_ns)
            self.success.ns += miss_ns
            if self.latency is not None:
                self.latency.observe(LatencyKind.CACHE_MISS, miss_ns / 1000, now_s=time.monotonic())

    def _observe(self, queue_ns: int, request_ns: int, compute: tuple[int, int, int]) -> None:
        """One successful request's durations into the summaries, if kept (under `lock`)."""
        if self.latency is None:
            return
        now_s = time.monotonic()
        kinds = (LatencyKind.COMPUTE_INPUT, LatencyKind.COMPUTE_INFER, LatencyKind.COMPUTE_OUTPUT)
        self.latency.observe(LatencyKind.REQUEST, request_ns / 1000, now_s=now_s)
        self.latency.observe(LatencyKind.QUEUE, queue_ns / 1000, now_s=now_s)
        for kind, ns in zip(kinds, compute, strict=True):
            self.latency.observe(kind, ns / 1000, now_s=now_s)

    def record_failure(self, reason: FailureReason, request_ns: int) -> None:
        """A request that failed before it reached the model (bad input, rejected, canceled)."""
        with self.lock:
            self.fail.add(request_ns)
            self.failures[reason] += 1
            self.last_inference_ms = time.time_ns() // 1_000_000

    def to_json(self, name: str, version: str) -> dict[str, Any]:
        """One `model_stats` entry of Triton's statistics extension."""
        with self.lock:
            return {
                "name": name,
                "version": version,
                "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {
                    "success": self.success.to_json(),
                    "fail": self.fail.to_json(),
                    "queue": self.queue.to_json(),
                    "compute_input": self.compute_input.to_json(),
                    "compute_infer": self.compute_infer.to_json(),
                    "compute_output": self.compute_output.to_json(),
                    "cache_hit": self.cache_hit.to_json(),
                    "cache_miss": self.cache_miss.to_json(),
                },
                "response_stats": {},  # Triton's field (empty for non-decoupled models)
                "batch_stats": [
                    {
                        "batch_size": size,
                        "compute_input": b.compute_input.to_json(),
                        "compute_infer": b.compute_infer.to_json(),
                        "compute_output": b.compute_output.to_json(),
                    }
                    for size, b in sorted(self.batches.items())
                ],
                "memory_usage": [],
            }


class StatsBook:
    """Every loaded model version's `ModelStats`, keyed by (model, version); `summaries`: each
    keeps Triton's latency summaries too."""

    def __init__(self, *, summaries: bool = False) -> None:
        self._summaries = summaries
        self._lock = threading.Lock()
        self._stats: dict[tuple[str, str], ModelStats] = {}

    def open(self, model: str, version: str) -> ModelStats:
        """Fresh counters for a version being loaded (a reload starts from zero, as in Triton)."""
        stats = ModelStats(summaries=self._summaries)
        with self._lock:
            self._stats[(model, version)] = stats
        return stats

    def close(self, model: str, version: str, stats: ModelStats) -> bool:
        """Drop a version's counters, if they are still `stats`: a reload opens the new
        version's before the old one is unloaded, and those stay. True when dropped."""
        with self._lock:
            if self._stats.get((model, version)) is not stats:
                return False
            del self._stats[(model, version)]
            return True

    def items(self) -> list[tuple[tuple[str, str], ModelStats]]:
        with self._lock:
            return sorted(self._stats.items())
