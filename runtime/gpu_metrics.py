"""Triton's per-GPU metrics (`nv_gpu_utilization`, `nv_gpu_memory_*`, power, energy) via NVML.

NVML comes from the `nvidia-ml-py` package (module `pynvml`, in the `gpu` extra), imported on
the first scrape. Where it is not installed, or its library (`libnvidia-ml.so`) is not on the
machine, or no GPU is there, the families are simply absent from `/metrics`, as with Triton's
`--allow-gpu-metrics=false`; the reason is logged once. Values and names follow Triton's:
utilization in [0, 1], bytes, watts, and joules since the server started, labelled `gpu_uuid`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

__all__ = ["GpuReader", "GpuSample", "NvmlReader", "gpu_families"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuSample:
    """One GPU now: utilization [0, 1], memory in bytes, power in watts, energy in joules since
    the reader started."""

    uuid: str
    utilization: float
    memory_total_bytes: int
    memory_used_bytes: int
    power_watts: float
    power_limit_watts: float
    energy_joules: float


class GpuReader(Protocol):
    """Reads every GPU of the machine; an empty list when there is nothing to read."""

    def samples(self) -> list[GpuSample]: ...


# (name, help, value of a sample) as Triton writes them; energy is Triton's one counter here.
_GAUGES = (
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", lambda s: s.utilization),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", lambda s: s.memory_total_bytes),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", lambda s: s.memory_used_bytes),
    ("nv_gpu_power_usage", "GPU power usage in watts", lambda s: s.power_watts),
    ("nv_gpu_power_limit", "GPU power management limit in watts", lambda s: s.power_limit_watts),
)
ENERGY = (
    "nv_energy_consumption",
    "GPU energy consumption in joules since the Triton server started",
)


def gpu_families(samples: list[GpuSample]) -> Iterator[Metric]:
    """Triton's GPU families for `samples`; nothing at all when there are none."""
    if not samples:
        return
    for name, help_text, value in _GAUGES:
        family = GaugeMetricFamily(name, help_text, labels=["gpu_uuid"])
        for sample in samples:
            family.add_metric([sample.uuid], value(sample))
        yield family
    energy = Metric(*ENERGY, "counter")  # the bare name, as Triton's counters have
    for sample in samples:
        energy.add_sample(ENERGY[0], {"gpu_uuid": sample.uuid}, sample.energy_joules)
    yield energy


class NvmlReader:
    """`GpuReader` over NVML (`pynvml`), initialized on first use; [] when NVML is not here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # scrapes may run concurrently
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._energy_start: dict[int, float] = {}
        self._tried = False

    def samples(self) -> list[GpuSample]:
        with self._lock:
            if not self._tried:
                self._tried = True
                self._start()
            if self._nvml is None:
                return []
            out = []
            for index, handle in enumerate(self._handles):
                sample = self._read(index, handle)
                if sample is not None:
                    out.append(sample)
            return out

    def _start(self) -> None:
        try:
            import pynvml
        except ImportError:
            logger.info("GPU metrics off: nvidia-ml-py (pynvml) is not installed")
            return
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except pynvml.NVMLError as exc:
            logger.info("GPU metrics off: NVML is not usable here (%s)", exc)
            return
        self._nvml = pynvml
        for index, handle in enumerate(self._handles):
            self._energy_start[index] = self._energy_mj(handle) or 0.0
        logger.info("GPU metrics on: %d GPU(s) through NVML", count)

    def _read(self, index: int, handle: Any) -> GpuSample | None:
        nvml = self._nvml
        try:
            uuid = nvml.nvmlDeviceGetUUID(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            utilization = nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
            power = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            limit = nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
        except nvml.NVMLError as exc:  # a GPU that fell off the bus, a field it lacks
            logger.debug("GPU %d not read: %s", index, exc)
            return None
        energy = (self._energy_mj(handle) or 0.0) - self._energy_start.get(index, 0.0)
        return GpuSample(
            uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
            utilization=utilization,
            memory_total_bytes=int(memory.total),
            memory_used_bytes=int(memory.used),
            power_watts=power,
            power_limit_watts=limit,
            energy_joules=max(0.0, energy) / 1000.0,
        )

    def _energy_mj(self, handle: Any) -> float | None:
        try:
            return float(self._nvml_module().nvmlDeviceGetTotalEnergyConsumption(handle))
        except self._nvml_module().NVMLError:  # pre-Volta GPUs have no energy counter
            return None

    def _nvml_module(self) -> Any:
        import pynvml

        return pynvml
