"""Triton's per-GPU metrics (`nv_gpu_utilization`, `nv_gpu_memory_*`, power, energy) via NVML,
on both servers' `/metrics`: `thaw serve`'s, and `thaw up`'s front door for the host it and its
local replicas share (as tritonserver reports them on its metrics port).

NVML comes from the `nvidia-ml-py` package (module `pynvml`, in the `gpu` extra), imported on
the first scrape. Where it is not installed, or its library (`libnvidia-ml.so`) is not on the
machine, or no GPU is there, the families are simply absent from `/metrics`, as with Triton's
`--allow-gpu-metrics=false`; the reason is logged once. Values and names follow Triton's:
utilization in [0, 1], bytes, watts, and joules since the server started, labelled `gpu_uuid`.

Per device, as far as NVML allows: only the GPUs this process can use (CUDA_VISIBLE_DEVICES
applied as CUDA applies it, as Triton reports the GPUs it uses, not every GPU of the node), and
beside Triton's device-wide `nv_gpu_memory_used_bytes` what this process itself holds on each
(`thaw_gpu_process_memory_bytes`, from NVML's running compute processes; absent where NVML
cannot see this process: inside a PID namespace NVML reports host PIDs). Utilization and power
stay device-wide: NVML has no per-process reading of them.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from thawwire.cuda_visible import visible_devices

__all__ = [
    "GpuCollector",
    "GpuReader",
    "GpuSample",
    "NvmlReader",
    "bare_energy_header",
    "gpu_families",
]

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
    process_memory_bytes: int | None = None  # what this process holds on it (None: unseen)


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
PROCESS_MEMORY = (
    "thaw_gpu_process_memory_bytes",
    "GPU memory this server process holds on the GPU, in bytes (NVML's compute processes)",
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
    seen = [s for s in samples if s.process_memory_bytes is not None]
    if seen:
        mine = GaugeMetricFamily(*PROCESS_MEMORY, labels=["gpu_uuid"])
        for sample in seen:
            mine.add_metric([sample.uuid], float(sample.process_memory_bytes or 0))
        yield mine


_ENERGY_HEADER = re.compile(rb"^# (HELP|TYPE) (" + ENERGY[0].encode() + rb")_total ", re.MULTILINE)


def bare_energy_header(text: bytes) -> bytes:
    """`text` (prometheus_client's exposition) with the energy counter's HELP and TYPE under
    Triton's bare name: prometheus_client writes a counter's as `<name>_total`."""
    return _ENERGY_HEADER.sub(rb"# \1 \2 ", text)


class GpuCollector:
    """A registry's collector of `gpu_families` from `reader`, read at each scrape (HELP and
    TYPE of the energy counter: `bare_energy_header` on the exposition)."""

    def __init__(self, reader: GpuReader) -> None:
        self._reader = reader

    def collect(self) -> Iterator[Metric]:
        yield from gpu_families(self._reader.samples())


_FROM_ENV = object()  # NvmlReader's default: CUDA_VISIBLE_DEVICES as the process has it


class NvmlReader:
    """`GpuReader` over NVML (`pynvml`), initialized on first use; [] when NVML is not here."""

    def __init__(
        self, *, nvml: Any | None = None, visible: str | object | None = _FROM_ENV
    ) -> None:
        self._lock = threading.Lock()  # scrapes may run concurrently
        self._given = nvml  # a test's NVML module (None: import pynvml)
        # CUDA_VISIBLE_DEVICES: read where CUDA reads it, at the first scrape (it is CUDA's).
        self._visible = visible
        self._pid = os.getpid()
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
        pynvml: Any = self._given
        if pynvml is None:
            try:
                import pynvml as module
            except ImportError:
                logger.info("GPU metrics off: nvidia-ml-py (pynvml) is not installed")
                return
            pynvml = module
        try:
            pynvml.nvmlInit()
            every = [
                pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
            ]
            uuids = [_text(pynvml.nvmlDeviceGetUUID(h)) for h in every]
        except pynvml.NVMLError as exc:
            logger.info("GPU metrics off: NVML is not usable here (%s)", exc)
            return
        visible = self._visible
        spec = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is _FROM_ENV else visible
        self._handles = [every[i] for i in visible_devices(spec, uuids)]  # type: ignore[arg-type]
        count = len(self._handles)
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
            uuid=_text(uuid),
            utilization=utilization,
            memory_total_bytes=int(memory.total),
            memory_used_bytes=int(memory.used),
            power_watts=power,
            power_limit_watts=limit,
            energy_joules=max(0.0, energy) / 1000.0,
            process_memory_bytes=self._process_memory(handle),
        )

    def _process_memory(self, handle: Any) -> int | None:
        """Bytes this process uses on the GPU per NVML, None when NVML does not list it."""
        nvml = self._nvml
        try:
            processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except nvml.NVMLError:
            return None
        mine = [p for p in processes if int(p.pid) == self._pid]
        if not mine:
            return None
        used = getattr(mine[0], "usedGpuMemory", None)
        return int(used) if isinstance(used, int) else None

    def _energy_mj(self, handle: Any) -> float | None:
        nvml = self._nvml
        try:
            return float(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        except nvml.NVMLError:  # pre-Volta GPUs have no energy counter
            return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
