"""Triton's host gauges on `/metrics` for both servers: `nv_cpu_utilization` (the share of CPU
time busy since the previous scrape, 0.0-1.0, by Triton's formula over `/proc/stat`) and
`nv_cpu_memory_total_bytes` / `nv_cpu_memory_used_bytes` (RAM), read at scrape time (Triton
samples them every `--metrics-interval-ms`; Thaw reads them when asked)."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

__all__ = ["CpuUtilization", "HostCollector", "busy_share"]

_BUSY = ("user", "nice", "system", "irq", "softirq", "steal")
_IDLE = ("idle", "iowait")


def busy_share(new: object, old: object) -> float | None:
    """Triton's `CpuUtilization`: busy time over busy + idle time between two readings of the
    aggregate CPU line (`psutil.cpu_times()`), a counter that went backwards counting 0. None
    when no time passed between them (two scrapes in one clock tick), where Triton's division
    would give NaN."""
    busy = sum(max(getattr(new, f, 0.0) - getattr(old, f, 0.0), 0.0) for f in _BUSY)
    idle = sum(max(getattr(new, f, 0.0) - getattr(old, f, 0.0), 0.0) for f in _IDLE)
    if busy + idle <= 0.0:
        return None
    return busy / (busy + idle)


class CpuUtilization:
    """The host's CPU utilization since the previous reading, at full precision
    (`psutil.cpu_percent` rounds to 0.1%, so a host 99.96% busy read 1.0; a fully busy host
    reads exactly 1.0 by Triton's formula too). A reading taken less than a clock tick after
    the previous one repeats the last value."""

    def __init__(self) -> None:
        self._last = psutil.cpu_times()
        self._value = 0.0

    def read(self) -> float:
        now = psutil.cpu_times()
        share = busy_share(now, self._last)
        if share is not None:
            self._value, self._last = share, now
        return self._value


class HostCollector:
    """A prometheus_client collector of Triton's host gauges: the CPU's utilization since the
    previous scrape, and RAM total and used (`total - available`, Triton's reading of
    `MemAvailable`)."""

    def __init__(self) -> None:
        self._cpu = CpuUtilization()

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        memory = psutil.virtual_memory()
        yield GaugeMetricFamily(
            "nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", value=self._cpu.read()
        )
        yield GaugeMetricFamily(
            "nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", value=memory.total
        )
        yield GaugeMetricFamily(
            "nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes",
            value=memory.total - memory.available,
        )  # fmt: skip
