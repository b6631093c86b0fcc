"""Triton's host gauges on `/metrics` for both servers: `nv_cpu_utilization` (the share of CPU
time busy since the previous scrape, 0.0-1.0) and `nv_cpu_memory_total_bytes` /
`nv_cpu_memory_used_bytes` (RAM), read at scrape time (Triton samples them every
`--metrics-interval-ms`; Thaw reads them when asked)."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

__all__ = ["HostCollector", "cpu_families"]


def cpu_families() -> Iterator[GaugeMetricFamily]:
    memory = psutil.virtual_memory()
    yield GaugeMetricFamily(
        "nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]",
        value=psutil.cpu_percent(interval=None) / 100.0,
    )  # fmt: skip
    yield GaugeMetricFamily(
        "nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", value=memory.total
    )
    yield GaugeMetricFamily(
        "nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes",
        value=memory.total - memory.available,
    )  # fmt: skip


class HostCollector:
    """A prometheus_client collector of `cpu_families` (`thaw up`'s registry: the host its
    front door and local replicas run on)."""

    def __init__(self) -> None:
        psutil.cpu_percent(interval=None)  # prime: the first reading is since this call

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield from cpu_families()
