"""Triton's host gauges on both servers' `/metrics` (qa/L0_metrics cpu_metrics_test.py)."""

from __future__ import annotations

import re

from prometheus_client import generate_latest

from activator.observe.metrics import Metrics as ActivatorMetrics
from runtime.observe.metrics import Metrics as RuntimeMetrics
from thawserver.metrics_config_flags import MetricsSettings


def test_both_servers_expose_the_cpu_gauges_in_range() -> None:
    for text in (
        generate_latest(ActivatorMetrics().registry).decode(),
        RuntimeMetrics().exposition().decode(),
    ):
        utilization = float(re.search(r"^nv_cpu_utilization (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
        used = float(re.search(r"^nv_cpu_memory_used_bytes (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
        total = float(re.search(r"^nv_cpu_memory_total_bytes (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
        assert 0.0 <= utilization <= 1.0
        assert 0 < used <= total


def test_allow_cpu_metrics_false_leaves_the_cpu_gauges_out_of_both_servers() -> None:
    for text in (
        generate_latest(ActivatorMetrics(host_gauges=False).registry).decode(),
        RuntimeMetrics(settings=MetricsSettings(cpu_gauges=False)).exposition().decode(),
    ):
        assert "nv_cpu_" not in text
