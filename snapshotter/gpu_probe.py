"""Which GPUs this process can use and their compute capability, read without a CUDA context.

    CUDA_VISIBLE_DEVICES ─┐
                          ├─▶ NVML (pynvml): every GPU's UUID and compute capability ─┐
                          │     └─ no NVML (not installed, no libnvidia-ml, no driver) │
                          └─▶ /dev/nvidia<N> device nodes: how many, nothing more ─────┴─▶ GpuScan

Triton resolves `KIND_AUTO` by asking CUDA how many GPUs there are; a `thaw up` pool must
answer the same question in a process that will later fork (the fork server) or before it has
chosen to become CUDA-ready, and creating a CUDA context there would poison every child
(CUDA does not survive a fork) or cost ~0.3 s and hundreds of MiB of VRAM per process. NVML
reads the driver without a CUDA context; the device nodes say at least how many GPUs there
are. `CUDA_VISIBLE_DEVICES` is applied the way the CUDA runtime applies it (indices or `GPU-`
UUID prefixes, the list cut at the first entry that names no device), so the answer is the
CUDA ordinals this process will see. One caveat: NVML counts in PCI bus order, CUDA by
default fastest first; on a machine of mixed GPUs set `CUDA_DEVICE_ORDER=PCI_BUS_ID` (as
Triton's docs also advise) for the compute capabilities to line up.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thawwire.cuda_visible import visible_devices

__all__ = [
    "GpuInfo",
    "GpuScan",
    "cuda_target",
    "local_gpus",
    "nvml_memory",
    "scan_gpus",
    "visible_devices",
]

logger = logging.getLogger(__name__)

_DEVICE_NODE = re.compile(r"nvidia(\d+)")


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as this process's CUDA will number it: `index` (the `cuda:N` ordinal), its UUID
    (empty when only a device node was seen) and compute capability (None when unknown)."""

    index: int
    uuid: str = ""
    compute_capability: tuple[int, int] | None = None

    @property
    def target(self) -> str | None:
        """Its image target, `cuda:sm_NN`, when the compute capability is known."""
        if self.compute_capability is None:
            return None
        major, minor = self.compute_capability
        return f"cuda:sm_{major}{minor}"


@dataclass(frozen=True)
class GpuScan:
    """Every GPU this process may use; `source` is how they were found (`nvml`, `/dev`),
    `reason` why there are none."""

    gpus: tuple[GpuInfo, ...] = ()
    source: str = "none"
    reason: str = "no CUDA device"

    @property
    def count(self) -> int:
        return len(self.gpus)

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(g.index for g in self.gpus)


def scan_gpus(*, visible: str | None, nvml: Any | None = None, dev: Path = Path("/dev")) -> GpuScan:
    """The GPUs for `CUDA_VISIBLE_DEVICES` = `visible`, through `nvml` (the `pynvml` module;
    None: import it) or, without NVML, the device nodes under `dev`. Never touches CUDA."""
    physical, why = _nvml_devices(nvml)
    if physical is not None:
        indices = visible_devices(visible, [uuid for uuid, _ in physical])
        gpus = tuple(
            GpuInfo(cuda, physical[i][0], physical[i][1]) for cuda, i in enumerate(indices)
        )
        return GpuScan(gpus, "nvml", "" if gpus else _none_reason(visible, "NVML"))
    nodes = _device_nodes(dev)
    indices = visible_devices(visible, [""] * nodes)
    if indices:
        return GpuScan(tuple(GpuInfo(i) for i in range(len(indices))), "/dev", "")
    return GpuScan((), "none", f"{_none_reason(visible, 'no /dev/nvidia* device node')} ({why})")


def _none_reason(visible: str | None, where: str) -> str:
    if visible is not None and visible.strip() in ("", "-1"):
        return f"no CUDA device visible (CUDA_VISIBLE_DEVICES={visible!r})"
    return f"no CUDA device ({where})"


def _nvml_devices(nvml: Any | None) -> tuple[list[tuple[str, tuple[int, int] | None]] | None, str]:
    """[(uuid, compute capability)] of every physical GPU, or None and why NVML gave nothing."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return None, "nvidia-ml-py is not installed"
        nvml = pynvml
    return _read_nvml(nvml)


def _read_nvml(nvml: Any) -> tuple[list[tuple[str, tuple[int, int] | None]] | None, str]:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:  # no libnvidia-ml.so, no driver
        return None, f"NVML: {exc}"
    try:
        out = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid = nvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            try:
                major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
                capability: tuple[int, int] | None = (int(major), int(minor))
            except nvml.NVMLError:
                capability = None
            out.append((uuid, capability))
        return out, ""
    except nvml.NVMLError as exc:
        return None, f"NVML: {exc}"
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _device_nodes(dev: Path) -> int:
    try:
        names = os.listdir(dev)
    except OSError:
        return 0
    return sum(1 for name in names if _DEVICE_NODE.fullmatch(name))


@functools.cache
def local_gpus() -> GpuScan:
    """This process's GPUs, scanned once. `CUDA_VISIBLE_DEVICES` is read here, where the CUDA
    runtime itself would read it: it is CUDA's setting, not Thaw's."""
    scan = scan_gpus(visible=os.environ.get("CUDA_VISIBLE_DEVICES"))
    logger.debug("GPU scan: %d GPU(s) via %s %s", scan.count, scan.source, scan.reason)
    return scan


def cuda_target(device_id: int = 0, scan: GpuScan | None = None) -> str:
    """The image target (`cuda:sm_NN`) of GPU `device_id`: from NVML when it knows the compute
    capability (no CUDA context is created for this), else from torch (which creates one)."""
    scan = scan if scan is not None else local_gpus()
    if device_id < scan.count and (target := scan.gpus[device_id].target) is not None:
        return target
    import torch

    major, minor = torch.cuda.get_device_capability(device_id)
    return f"cuda:sm_{major}{minor}"


def nvml_memory(index: int, scan: GpuScan | None = None, *, nvml: Any | None = None) -> Any:
    """`DeviceMemory` of CUDA ordinal `index` as the driver reports it (free to any framework;
    what torch's allocator keeps cached counts as used), through NVML, without a CUDA
    context; None when NVML cannot say."""
    from snapshotter.device_budget import DeviceMemory

    scan = scan if scan is not None else local_gpus()
    if index >= scan.count or not scan.gpus[index].uuid:
        return None
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return None
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        handle = nvml.nvmlDeviceGetHandleByUUID(scan.gpus[index].uuid)
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
        return DeviceMemory(free_bytes=int(info.free), total_bytes=int(info.total))
    except nvml.NVMLError:
        return None
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()
