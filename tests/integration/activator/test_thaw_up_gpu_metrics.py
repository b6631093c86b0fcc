"""`thaw up`'s metrics port reports the GPUs of its host (`nv_gpu_*`, `nv_energy_consumption`),
as tritonserver's does, with every model at zero: no replica needs to be asked.

This machine has no GPU, so the `thaw up` process is given a `pynvml` of two GPUs on its
PYTHONPATH (NVML's Python API, as nvidia-ml-py names it); the process, its flag handling, the
collector and the page are the real ones. `CUDA_VISIBLE_DEVICES` applies as CUDA applies it.
"""

from __future__ import annotations

import os
import re
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.models import make_add_sub
from tests.fixtures.up_process import UpProcess

_FAKE_NVML = '''
"""Two GPUs, as NVML would report them."""

class NVMLError(Exception):
    pass

class _Memory:
    total, used = 80 << 30, 3 << 30

class _Rates:
    gpu = 37

def nvmlInit():
    pass

def nvmlDeviceGetCount():
    return 2

def nvmlDeviceGetHandleByIndex(i):
    return i

def nvmlDeviceGetUUID(h):
    return "GPU-fa4e%04d-0000-1111-2222-333344445555" % h

def nvmlDeviceGetMemoryInfo(h):
    return _Memory()

def nvmlDeviceGetUtilizationRates(h):
    return _Rates()

def nvmlDeviceGetPowerUsage(h):
    return 250_000

def nvmlDeviceGetEnforcedPowerLimit(h):
    return 700_000

def nvmlDeviceGetTotalEnergyConsumption(h):
    return 1_000_000

def nvmlDeviceGetComputeRunningProcesses(h):
    return []
'''


@pytest.fixture
def fake_nvml(tmp_path: Path) -> dict[str, str]:
    """The environment of a `thaw up` that finds two GPUs through NVML, of which CUDA sees
    the second only."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "pynvml.py").write_text(_FAKE_NVML)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "CUDA_VISIBLE_DEVICES": "1"}


def _start(tmp_path: Path, env: dict[str, str], *flags: str) -> UpProcess:
    repo = tmp_path / "repo"
    make_add_sub(repo)
    args = ("--warm-pool", "0", "--preload-frameworks", "", "--no-image-build", *flags)
    return UpProcess(repo, *args, "--cache", str(tmp_path / "cache"), env=env)


def _page(up: UpProcess) -> str:
    with urllib.request.urlopen(up.metrics_url + "/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def test_thaw_up_reports_its_hosts_gpus_at_zero(tmp_path: Path, fake_nvml: dict[str, str]) -> None:
    up = _start(tmp_path, fake_nvml)
    try:
        text = _page(up)
    finally:
        up.stop()
    gpu = '{gpu_uuid="GPU-fa4e0001-0000-1111-2222-333344445555"}'
    assert f"nv_gpu_utilization{gpu} 0.37" in text
    assert f"nv_gpu_memory_total_bytes{gpu} 85899345920\n" in text
    assert f"nv_gpu_memory_used_bytes{gpu} 3221225472\n" in text
    assert f"nv_gpu_power_usage{gpu} 250\n" in text
    assert f"nv_gpu_power_limit{gpu} 700\n" in text
    assert f"nv_energy_consumption{gpu} 0\n" in text  # joules since thaw up started
    assert "# TYPE nv_energy_consumption counter" in text
    assert "GPU-fa4e0000" not in text  # CUDA_VISIBLE_DEVICES=1: not a GPU thaw up uses
    assert "thaw_gpu_process_memory_bytes" not in text  # the front door holds no GPU memory


def test_allow_gpu_metrics_false_leaves_them_out(tmp_path: Path, fake_nvml: dict[str, str]) -> None:
    up = _start(tmp_path, fake_nvml, "--allow-gpu-metrics=false")
    try:
        text = _page(up)
    finally:
        up.stop()
    assert not re.search(r"^(# \w+ )?nv_(gpu|energy)_", text, re.M)
    assert "nv_cpu_utilization" in text
