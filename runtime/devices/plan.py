"""Where each instance of a model runs and where its weights are restored: a pure decision.

    config.instance_group ─┬─ KIND_CPU ───────────────────────────────▶ cpu
      (completed: KIND_AUTO │                                          restore on the host
       resolved, gpus filled)├─ KIND_GPU, gpus: [i, ...] ─ no CUDA ────▶ cpu     (fallback, logged,
                            │   `count` instances on each gpu           counted: `no_cuda`)
                            │    ├─ gpu id not on this machine ────────▶ refused (as Triton does)
                            │    ├─ onnxruntime without the CUDA EP ───▶ cpu
                            │    │                                    (`no_onnxruntime_cuda`)
                            │    ├─ tensorrt accelerator, no TRT EP ───▶ cuda:i on the CUDA EP
                            │    │                                          (`no_tensorrt`)
                            │    └─ otherwise ──────────────────────────▶ cuda:i
                            └─ python backend: as configured (its stubs place themselves)

Restore targets (`Placement.restore_device`): torch instances on a GPU get their weights restored
into that GPU (parameters become views of device memory: one copy, held once). onnxruntime
instances are restored on the host whatever their provider: `add_external_initializers` with
device OrtValues is copied to the host when they are added and back to the device when the
session is created (onnxruntime#29009), so a device restore would hold the weights twice in VRAM
and copy them three times; the CUDA EP copies host initializers to the device once (from
page-locked memory only when the restore used the warm process's pinned `--arena-bytes` arena).
Until a zero-copy device path (`SessionOptions.add_initializer` with device OrtValues, the
candidate) is proven on a GPU by `benchmarks/gpu_check.py`, that is the plan. The TensorRT EP
and `tensorrt_plan` read host memory (engines carry their own weights). A version is restored
once per distinct restore device.

`Capabilities` is what the machine offers, read by `device_inventory` (or given by a test).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from thawserver.device_flags import MIN_COMPUTE_CAPABILITY
from tritonconfig import tensorrt_parameters
from tritonconfig.schema import mc

__all__ = [
    "Capabilities",
    "DevicePlan",
    "DevicePlanError",
    "Fallback",
    "FallbackReason",
    "Placement",
    "needs_gpu",
    "plan_devices",
]

CUDA_EP = "CUDAExecutionProvider"
TRT_EP = "TensorrtExecutionProvider"


class DevicePlanError(ValueError):
    """The model's instance groups ask for a device this machine cannot give."""


class FallbackReason(StrEnum):
    """Why an instance runs somewhere else than its config asked (a metric label)."""

    NO_CUDA = "no_cuda"
    NO_ONNXRUNTIME_CUDA = "no_onnxruntime_cuda"
    NO_TENSORRT = "no_tensorrt"
    # Reported by a backend at load (LoadContext.fallback): it serves, differently than planned.
    TENSORRT_EP_FAILED = "tensorrt_ep_failed"  # the session came up on the CUDA EP
    CUDA_GRAPH_CAPTURE = "cuda_graph_capture"  # those shapes run eagerly
    CPU_PLACED_OPS = "cpu_placed_ops"  # an exported program computes part of its graph on the CPU


@dataclass(frozen=True)
class Fallback:
    """One fallback: its reason and a sentence for the log line."""

    reason: FallbackReason
    message: str


@dataclass(frozen=True)
class Capabilities:
    """What this machine offers the backends. `cuda_devices` 0 means no CUDA (`no_cuda_reason`
    says why); `ort_providers` onnxruntime's execution providers; `tensorrt` whether the
    `tensorrt` package imports; `unsupported_gpus` those of a compute capability below
    `min_compute_capability`, which an instance group may not name (Triton's rule)."""

    cuda_devices: int = 0
    no_cuda_reason: str = "no CUDA device"
    ort_providers: frozenset[str] = frozenset({"CPUExecutionProvider"})
    tensorrt: bool = False
    # GPUs below `--min-supported-compute-capability` (`min_compute_capability`): not used
    unsupported_gpus: frozenset[int] = frozenset()
    min_compute_capability: float = MIN_COMPUTE_CAPABILITY


@dataclass(frozen=True)
class Placement:
    """One instance: its group and index, the kind and device it runs on, where its image is
    restored, the fallback that moved it, if any, and whether its group is `passive` (loaded
    and initialized, never given a request: Triton's passive instances)."""

    group: str
    index: int
    kind: str  # "KIND_CPU" | "KIND_GPU" | "KIND_MODEL" (what the backend is told)
    device_id: int
    restore_device: str  # "cpu" | "cuda:N"
    fallback: Fallback | None = None
    passive: bool = False

    @property
    def device(self) -> str:
        return f"cuda:{self.device_id}" if self.kind == "KIND_GPU" else "cpu"


@dataclass(frozen=True)
class DevicePlan:
    """Every instance of one model version, in instance-group order."""

    placements: tuple[Placement, ...] = field(default_factory=tuple)

    @property
    def restore_devices(self) -> tuple[str, ...]:
        """Distinct restore devices, in first-use order: one restore each."""
        return tuple(dict.fromkeys(p.restore_device for p in self.placements))

    @property
    def fallbacks(self) -> tuple[Fallback, ...]:
        return tuple(dict.fromkeys(p.fallback for p in self.placements if p.fallback))


def needs_gpu(config: mc.ModelConfig) -> bool:
    """Whether any instance group asks for a GPU (only then is the machine inspected)."""
    return any(g.kind == mc.ModelInstanceGroup.KIND_GPU for g in config.instance_group)


def plan_devices(config: mc.ModelConfig, caps: Capabilities) -> DevicePlan:
    """The placement of every instance (see the module docstring); DevicePlanError when a group
    names a GPU this machine does not have, or a TensorRT plan finds no CUDA or TensorRT."""
    placements = []
    for group in config.instance_group:
        if group.kind == mc.ModelInstanceGroup.KIND_GPU:
            # Triton's rule: `count` instances on EACH of the group's GPUs; the index counts
            # through the group (instance names `<group>_<n>`).
            gpus = [gpu for gpu in (list(group.gpus) or [0]) for _ in range(group.count)]
            mine = [_gpu(config, group.name, i, gpu, caps) for i, gpu in enumerate(gpus)]
        else:
            kind = mc.ModelInstanceGroup.Kind.Name(group.kind)  # KIND_CPU, or python KIND_MODEL
            mine = [Placement(group.name, i, kind, 0, "cpu") for i in range(group.count)]
        placements += [replace(p, passive=True) for p in mine] if group.passive else mine
    return DevicePlan(tuple(placements))


def _gpu(config: mc.ModelConfig, group: str, index: int, gpu: int, caps: Capabilities) -> Placement:
    backend = config.backend
    if backend == "python":  # its stub processes read the device from the config themselves
        return Placement(group, index, "KIND_GPU", gpu, "cpu")
    if backend == "tensorrt":
        return _plan_instance(config, group, index, gpu, caps)
    if caps.cuda_devices == 0:
        fallback = Fallback(
            FallbackReason.NO_CUDA,
            f"instance group '{group}' asks for GPU {gpu}: {caps.no_cuda_reason}; running on CPU",
        )
        return Placement(group, index, "KIND_CPU", 0, "cpu", fallback)
    _check_gpu_id(config.name, group, gpu, caps)
    device = f"cuda:{gpu}"
    if backend != "onnxruntime":
        return Placement(group, index, "KIND_GPU", gpu, device)
    if CUDA_EP not in caps.ort_providers:
        fallback = Fallback(
            FallbackReason.NO_ONNXRUNTIME_CUDA,
            f"instance group '{group}' asks for GPU {gpu}, but this onnxruntime has no "
            f"{CUDA_EP} (onnxruntime-gpu is not installed); running on CPU",
        )
        return Placement(group, index, "KIND_CPU", 0, "cpu", fallback)
    wants_trt = tensorrt_parameters(config) is not None
    if wants_trt and TRT_EP in caps.ort_providers:
        return Placement(group, index, "KIND_GPU", gpu, "cpu")  # TensorRT builds from the host
    no_trt = (
        Fallback(
            FallbackReason.NO_TENSORRT,
            f"instance group '{group}' asks for the tensorrt accelerator, but this onnxruntime "
            f"has no {TRT_EP}; running on the CUDA EP",
        )
        if wants_trt
        else None
    )
    return Placement(group, index, "KIND_GPU", gpu, "cpu", no_trt)  # host: see the docstring


def _plan_instance(
    config: mc.ModelConfig, group: str, index: int, gpu: int, caps: Capabilities
) -> Placement:
    """A TensorRT plan runs on TensorRT on a GPU or nowhere: no fallback, a clear refusal."""
    if caps.cuda_devices == 0:
        raise DevicePlanError(
            f"model '{config.name}' is a TensorRT plan and needs a GPU: {caps.no_cuda_reason}"
        )
    if not caps.tensorrt:
        raise DevicePlanError(
            f"model '{config.name}' is a TensorRT plan but the `tensorrt` package is not "
            "installed (install the gpu extra: pip install 'thaw-serve[gpu]')"
        )
    _check_gpu_id(config.name, group, gpu, caps)
    return Placement(group, index, "KIND_GPU", gpu, "cpu")


def _check_gpu_id(model: str, group: str, gpu: int, caps: Capabilities) -> None:
    if not 0 <= gpu < caps.cuda_devices:
        raise DevicePlanError(
            f"instance group '{group}' asks for GPU {gpu}, and this machine has "
            f"{caps.cuda_devices} (ids 0-{caps.cuda_devices - 1})"
        )
    if gpu in caps.unsupported_gpus:  # core's ValidateInstanceGroup, in its words
        supported = ", ".join(
            str(i) for i in range(caps.cuda_devices) if i not in caps.unsupported_gpus
        )
        raise DevicePlanError(
            f"instance group {group} of model {model} specifies invalid or unsupported gpu id "
            f"{gpu}. GPUs with at least the minimum required CUDA compute compatibility of "
            f"{caps.min_compute_capability:f} are: {supported}"
        )
