"""What a runtime reports about itself: Prometheus metrics (Triton's `nv_*`), statistics, traces.

`custom_metrics` is imported by Python models' stub processes (via `pb_utils`): this `__init__`
imports nothing.

    metrics          Prometheus metrics with Triton's `nv_*` names, per server
    custom_metrics   the metrics Python models declare (`pb_utils.MetricFamily`)
    stats            per model-version inference statistics (the statistics extension)
    latency_summary  Triton's latency summaries: quantiles of recent durations (--metrics-config)
    tracing          sampled requests' trace records, Triton's format (the trace extension)

Exports `Metrics` and `StatsBook`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.observe.metrics import Metrics
    from runtime.observe.stats import StatsBook

__all__ = ["Metrics", "StatsBook"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "Metrics": "runtime.observe.metrics",
    "StatsBook": "runtime.observe.stats",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
