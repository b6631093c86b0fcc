"""What `--target auto|cpu|cuda[:sm_NN]` means on this machine: a pure decision over a GPU scan.

    --target auto ─┬─ the scan found GPUs ─▶ cuda: KIND_AUTO groups on every GPU found (Triton's
                   │                          rule), `cuda:sm_NN` images, a CUDA-ready warm-up
                   └─ none ───────────────▶ cpu (the scan's reason is logged once)
    --target cuda[:sm_NN] ─────────────────▶ cuda, as asked (GPUs as scanned; GPU 0 if none seen:
                                            the loads then say why they fall back)
    --target cpu ──────────────────────────▶ cpu: KIND_AUTO groups run on the CPU even on a GPU
                                            machine (an explicit choice)

The scan (`snapshotter.local_gpus`: NVML or /dev/nvidia*, CUDA_VISIBLE_DEVICES applied) never
creates a CUDA context, so a fork server or a CPU-only pool process can resolve `auto` freely.
Resolved once at the entry point and passed on as its own value (ServeConfig keeps the flag).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from thawserver.device_flags import MIN_COMPUTE_CAPABILITY

if TYPE_CHECKING:
    from snapshotter import GpuScan

__all__ = ["DeviceTarget", "local_target", "resolve_target", "unsupported_gpus"]


@dataclass(frozen=True)
class DeviceTarget:
    """`requested` (the flag), `gpus` (the CUDA ordinals KIND_AUTO groups and GPU groups that
    name none go to; empty: KIND_AUTO is the CPU), `image_target` (`cpu`, `cuda` — this GPU's
    `cuda:sm_NN`, resolved by the image loader — or `cuda:sm_NN`) and `reason`, a sentence."""

    requested: str
    gpus: tuple[int, ...]
    image_target: str
    reason: str

    @property
    def cuda(self) -> bool:
        return self.image_target.startswith("cuda")


def unsupported_gpus(scan: GpuScan, minimum: float = MIN_COMPUTE_CAPABILITY) -> frozenset[int]:
    """The GPUs of `scan` whose known compute capability is below `minimum` (tritonserver's
    `--min-supported-compute-capability`, default 6.0): Triton does not use them. A GPU whose
    capability is unknown counts as supported."""
    out = set()
    for g in scan.gpus:
        if g.compute_capability is not None:
            major, minor = g.compute_capability
            if major + minor / 10 < minimum - 1e-9:
                out.add(g.index)
    return frozenset(out)


def resolve_target(
    requested: str, scan: GpuScan, minimum: float = MIN_COMPUTE_CAPABILITY
) -> DeviceTarget:
    """The target for flag value `requested` given `scan` (see the module docstring). GPUs of a
    known compute capability below `minimum` are left out, as Triton leaves them out."""
    unsupported = unsupported_gpus(scan, minimum)
    usable = tuple(g.index for g in scan.gpus if g.index not in unsupported)
    if requested == "auto":
        if usable:
            found = f"{len(usable)} GPU(s) found via {scan.source}"
            return DeviceTarget(requested, usable, "cuda", found)
        reason = scan.reason if not scan.count else f"no GPU of compute capability >= {minimum:g}"
        return DeviceTarget(requested, (), "cpu", reason)
    if requested.startswith("cuda"):
        return DeviceTarget(requested, usable or (0,), requested, f"--target {requested}")
    return DeviceTarget(requested, (), "cpu", f"--target {requested}")


def local_target(requested: str, minimum: float = MIN_COMPUTE_CAPABILITY) -> DeviceTarget:
    """`requested` on this machine (`snapshotter.local_gpus`); a `cpu` target scans nothing."""
    if requested == "cpu":
        return DeviceTarget(requested, (), "cpu", "--target cpu")
    from snapshotter import local_gpus

    return resolve_target(requested, local_gpus(), minimum)
