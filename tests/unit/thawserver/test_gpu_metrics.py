"""Triton's GPU metrics: present with Triton's names where a GPU reader answers, absent without,
on both servers' metrics pages (`thaw serve`'s, and `thaw up`'s front door)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from activator.observe.metrics import Metrics as ActivatorMetrics
from runtime.observe.metrics import Metrics
from thawserver.gpu_metrics import GpuSample, NvmlReader
from thawserver.metrics_config_flags import MetricsSettings

H200 = GpuSample(
    uuid="GPU-0f1e2d3c-0000-1111-2222-333344445555", utilization=0.42,
    memory_total_bytes=150_000_000_000, memory_used_bytes=20_000_000_000,
    power_watts=312.5, power_limit_watts=700.0, energy_joules=1234.5,
)  # fmt: skip


class FakeGpus:
    def __init__(self, samples: list[GpuSample]) -> None:
        self._samples = samples

    def samples(self) -> list[GpuSample]:
        return self._samples


@pytest.mark.parametrize("page", [Metrics, ActivatorMetrics], ids=["thaw serve", "thaw up"])
def test_gpu_families_carry_tritons_names_help_and_labels(page: Any) -> None:
    # `thaw up`'s metrics port too: the GPUs of the host it and its local replicas share, at
    # zero as well (no replica to ask).
    text = page(gpu=FakeGpus([H200])).exposition().decode()
    label = f'{{gpu_uuid="{H200.uuid}"}}'
    assert f"nv_gpu_utilization{label} 0.42" in text
    assert f"nv_gpu_memory_total_bytes{label} 150000000000\n" in text
    assert f"nv_gpu_memory_used_bytes{label} 20000000000\n" in text
    assert f"nv_gpu_power_usage{label} 312.5" in text
    assert f"nv_gpu_power_limit{label} 700\n" in text
    assert f"nv_energy_consumption{label} 1234.5" in text
    assert "# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes" in text
    assert "# TYPE nv_energy_consumption counter" in text  # Triton's bare counter name
    assert "nv_energy_consumption_total" not in text
    assert "nv_cpu_utilization" in text


def test_without_a_gpu_reader_answering_the_families_are_absent() -> None:
    text = Metrics(gpu=FakeGpus([])).exposition().decode()
    assert not re.search(r"^(# \w+ )?nv_(gpu|energy)_", text, re.M)
    assert "nv_cpu_utilization" in text  # the rest of Triton's page is unchanged


def test_nvml_on_a_machine_without_it_reads_nothing() -> None:
    import torch

    if torch.cuda.is_available():
        return  # a GPU machine has NVML: tests/gpu checks the real readings
    reader = NvmlReader()
    assert reader.samples() == [] and reader.samples() == []  # tried once, then quiet
    assert "nv_gpu_" not in Metrics().exposition().decode()


class _Memory:
    def __init__(self, total: int, used: int) -> None:
        self.total, self.used = total, used


class _Rates:
    gpu = 50


class _Process:
    def __init__(self, pid: int, used: int) -> None:
        self.pid, self.usedGpuMemory = pid, used


class FakeNvml:
    """pynvml over three GPUs; this process holds 1 GiB on the second."""

    class NVMLError(Exception):
        pass

    def __init__(self, pid: int) -> None:
        self.uuids = ["GPU-a", "GPU-b", "GPU-c"]
        self.pid = pid

    def nvmlInit(self) -> None: ...

    def nvmlDeviceGetCount(self) -> int:
        return len(self.uuids)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self.uuids[h]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> _Memory:
        return _Memory(100 << 30, (h + 1) << 30)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> _Rates:
        return _Rates()

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 300_000

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 700_000

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return 5_000

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[_Process]:
        return [_Process(1, 5 << 30), _Process(self.pid, 1 << 30)] if h == 1 else []


def test_only_the_gpus_this_process_can_use_are_reported_with_its_own_memory() -> None:
    import os

    reader = NvmlReader(nvml=FakeNvml(os.getpid()), visible="1,2")
    samples = reader.samples()
    assert [s.uuid for s in samples] == ["GPU-b", "GPU-c"]  # not GPU-a: CUDA cannot see it
    assert samples[0].memory_used_bytes == 2 << 30  # device-wide, as Triton's
    assert samples[0].process_memory_bytes == 1 << 30 and samples[1].process_memory_bytes is None
    text = Metrics(gpu=reader).exposition().decode()
    assert 'thaw_gpu_process_memory_bytes{gpu_uuid="GPU-b"} 1073741824\n' in text
    assert 'thaw_gpu_process_memory_bytes{gpu_uuid="GPU-c"}' not in text


def test_allow_gpu_metrics_false_leaves_every_gpu_family_out() -> None:
    settings = MetricsSettings(gpu_gauges=False)
    text = Metrics(gpu=FakeGpus([H200]), settings=settings).exposition().decode()
    assert "nv_gpu_" not in text
    assert "nv_energy_" not in text
    assert "nv_cpu_utilization" in text  # only the GPU's families go


def test_thaw_up_allow_gpu_metrics_false_leaves_its_gpu_families_out() -> None:
    text = ActivatorMetrics(gpu=FakeGpus([H200]), gpu_gauges=False).exposition().decode()
    assert not re.search(r"^(# \w+ )?nv_(gpu|energy)_", text, re.M)
    assert "nv_cpu_utilization" in text
