"""Triton's host gauges on both servers' `/metrics` (qa/L0_metrics cpu_metrics_test.py)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest

from activator.observe.metrics import Metrics as ActivatorMetrics
from runtime.observe.metrics import Metrics as RuntimeMetrics
from thawserver import host_metrics
from thawserver.host_metrics import busy_share
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


def _times(**fields: float) -> SimpleNamespace:
    base = dict.fromkeys(
        ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"), 0.0
    )
    return SimpleNamespace(**(base | fields))


def test_busy_share_is_triton_formula_busy_over_busy_plus_idle() -> None:
    old = _times(user=10.0, idle=100.0)
    new = _times(
        user=11.0, nice=0.25, system=0.5, irq=0.01, softirq=0.02, steal=0.03,
        idle=101.0, iowait=0.19,
    )  # fmt: skip
    busy = 1.0 + 0.25 + 0.5 + 0.01 + 0.02 + 0.03
    assert busy_share(new, old) == pytest.approx(busy / (busy + 1.0 + 0.19))


def test_busy_share_counts_a_counter_that_went_backwards_as_zero() -> None:
    assert busy_share(_times(user=5.0, idle=3.0), _times(user=9.0, idle=2.0)) == 0.0


def test_busy_share_is_none_when_no_time_passed() -> None:
    assert busy_share(_times(user=1.0, idle=2.0), _times(user=1.0, idle=2.0)) is None


def test_utilization_keeps_full_precision_and_repeats_within_one_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    readings = iter(
        [
            _times(user=0.0, idle=0.0),
            _times(user=1.0, idle=2.0),  # 1/3: psutil.cpu_percent would say 33.3
            _times(user=1.0, idle=2.0),  # the same tick
            _times(user=1.01, idle=2.0),
        ]
    )
    monkeypatch.setattr(host_metrics.psutil, "cpu_times", lambda: next(readings))
    cpu = host_metrics.CpuUtilization()
    assert cpu.read() == 1.0 / 3.0
    assert cpu.read() == 1.0 / 3.0
    assert cpu.read() == 1.0
