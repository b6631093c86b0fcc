"""Triton's per-model Prometheus families (`nv_*` on the metrics port): their names, help texts
and labels, which `thaw serve` exposes for every loaded model version from its load and `thaw
up` for every model of its repository, a model at zero included (at 0 until a replica counts).

Counters carry `model` and `version` labels; `nv_inference_request_failure` also a `reason`
(one series per reason); the pending-request gauge `model` and `version`. Triton writes counter
names bare (no `_total`).
"""

from __future__ import annotations

__all__ = [
    "COUNTERS",
    "FAILURE",
    "FAILURE_REASONS",
    "LATENCY_COUNTERS",
    "PENDING",
    "SUMMARIES",
    "quantile_label",
]

# (name, help) of the per-model counters, in Triton's order.
COUNTERS: tuple[tuple[str, str], ...] = (
    ("nv_inference_request_success", "Number of successful inference requests, all batch sizes"),
    ("nv_inference_count", "Number of inferences performed (does not include cached requests)"),
    ("nv_inference_exec_count", "Number of model executions performed"),
    ("nv_inference_request_duration_us", "Cumulative inference request duration in microseconds"),
    ("nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds"),
    ("nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds"),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds",
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds",
    ),
)
# The counters `--metrics-config counter_latencies=false` leaves out.
LATENCY_COUNTERS = frozenset(name for name, _ in COUNTERS if name.endswith("_duration_us"))
# (name, help) of the summaries `--metrics-config summary_latencies=true` adds, every model's
# (the cache's two, nv_cache_{hit,miss}_summary_per_model, are for models using the cache).
SUMMARIES: tuple[tuple[str, str], ...] = (
    ("nv_inference_request_summary_us",
     "Summary of inference request duration in microseconds (includes cached requests)"),
    ("nv_inference_queue_summary_us",
     "Summary of inference queuing duration in microseconds (includes cached requests)"),
    ("nv_inference_compute_input_summary_us",
     "Cumulative compute input duration in microseconds (does not include cached requests)"),
    ("nv_inference_compute_infer_summary_us",
     "Cumulative compute inference duration in microseconds (does not include cached "
     "requests)"),
    ("nv_inference_compute_output_summary_us",
     "Cumulative inference compute output duration in microseconds (does not include cached "
     "requests)"),
)  # fmt: skip
FAILURE = ("nv_inference_request_failure", "Number of failed inference requests")
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
PENDING = ("nv_inference_pending_request_count", "Instantaneous number of pending requests")


def quantile_label(quantile: float) -> str:
    """A summary's `quantile` label as Triton's exposition (prometheus-cpp) writes it: `0.5`,
    `0.999`, `1`."""
    return str(int(quantile)) if float(quantile).is_integer() else repr(float(quantile))
