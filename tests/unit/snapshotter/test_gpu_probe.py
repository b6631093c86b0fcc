"""Finding GPUs without CUDA: NVML or device nodes, CUDA_VISIBLE_DEVICES applied as CUDA does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from snapshotter.gpu_probe import GpuScan, cuda_target, scan_gpus, visible_devices

UUIDS = ["GPU-aaaa-1111", "GPU-bbbb-2222", "GPU-cccc-3333"]


class FakeNvml:
    """pynvml's calls the probe makes, over a list of (uuid, compute capability)."""

    class NVMLError(Exception):
        pass

    def __init__(self, gpus: list[tuple[str, tuple[int, int]]], *, fail_init: bool = False):
        self.gpus, self.fail_init = gpus, fail_init
        self.initialized = self.shut = 0

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise self.NVMLError("NVML Shared Library Not Found")
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self.shut += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self.gpus[handle][0]

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return self.gpus[handle][1]


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        (None, [0, 1, 2]),
        ("", []),
        ("-1", []),
        ("2,0", [2, 0]),
        ("1,7,0", [1]),  # an index with no device ends the list, as CUDA does
        ("0,0,1", [0]),  # so does a repeat
        ("GPU-bbbb", [1]),  # a UUID prefix
        ("GPU-", []),  # ambiguous
        ("MIG-1234", []),
        (" 1 , 2 ", [1, 2]),
    ],
)
def test_cuda_visible_devices_is_read_as_the_cuda_runtime_reads_it(
    spec: str | None, want: list[int]
) -> None:
    assert visible_devices(spec, UUIDS) == want


def test_nvml_gives_ordinals_uuids_and_compute_capabilities(tmp_path: Path) -> None:
    nvml = FakeNvml([(UUIDS[0], (8, 0)), (UUIDS[1], (9, 0))])
    scan = scan_gpus(visible="1", nvml=nvml, dev=tmp_path)
    assert scan.source == "nvml" and scan.ids == (0,)  # cuda:0 is physical GPU 1
    assert scan.gpus[0].uuid == UUIDS[1] and scan.gpus[0].target == "cuda:sm_90"
    assert nvml.initialized == nvml.shut == 1  # NVML is released again
    assert cuda_target(0, scan) == "cuda:sm_90"  # no torch, no CUDA context


def test_without_nvml_the_device_nodes_count(tmp_path: Path) -> None:
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    scan = scan_gpus(visible=None, nvml=FakeNvml([], fail_init=True), dev=tmp_path)
    assert scan.source == "/dev" and scan.ids == (0, 1)
    assert scan.gpus[0].compute_capability is None
    assert scan_gpus(visible="", nvml=FakeNvml([], fail_init=True), dev=tmp_path).count == 0


def test_no_gpu_says_why(tmp_path: Path) -> None:
    scan = scan_gpus(visible=None, nvml=FakeNvml([], fail_init=True), dev=tmp_path)
    assert scan == GpuScan((), "none", scan.reason) and "no /dev/nvidia* device" in scan.reason
    hidden = scan_gpus(visible="-1", nvml=FakeNvml([(UUIDS[0], (9, 0))]), dev=tmp_path)
    assert hidden.count == 0 and "CUDA_VISIBLE_DEVICES='-1'" in hidden.reason


def test_scanning_this_machine_never_initializes_cuda() -> None:
    from snapshotter.gpu_probe import local_gpus

    before = "torch" in sys.modules and __import__("torch").cuda.is_initialized()
    local_gpus()
    if "torch" in sys.modules:
        assert __import__("torch").cuda.is_initialized() == before
