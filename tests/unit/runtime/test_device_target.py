"""`--target auto|cpu|cuda`: resolved from a GPU scan, and KIND_AUTO placed as Triton places it."""

from __future__ import annotations

from pathlib import Path

from runtime.config import ServeConfig
from runtime.devices.plan import Capabilities
from runtime.devices.target import DeviceTarget, local_target, resolve_target, unsupported_gpus
from runtime.models.manager import ModelManager
from runtime.models.repository import read_model
from runtime.observe.metrics import Metrics
from snapshotter import GpuInfo, GpuScan
from tests.fixtures.onnx_models import make_onnx_add
from tritonconfig.schema import mc

TWO = GpuScan((GpuInfo(0, "GPU-a", (9, 0)), GpuInfo(1, "GPU-b", (9, 0))), "nvml", "")
NONE = GpuScan((), "none", "no CUDA device (no /dev/nvidia* device node)")


def test_auto_is_cuda_on_every_gpu_found_and_cpu_without_one() -> None:
    assert resolve_target("auto", TWO) == DeviceTarget(
        "auto", (0, 1), "cuda", "2 GPU(s) found via nvml"
    )
    cpu = resolve_target("auto", NONE)
    assert cpu.gpus == () and not cpu.cuda and "no /dev/nvidia*" in cpu.reason


def test_gpus_triton_would_not_support_are_left_out() -> None:
    old = GpuScan((GpuInfo(0, "GPU-k80", (3, 7)), GpuInfo(1, "GPU-h200", (9, 0))), "nvml", "")
    assert resolve_target("auto", old).gpus == (1,)
    only_old = GpuScan((GpuInfo(0, "GPU-k80", (3, 7)),), "nvml", "")
    assert resolve_target("auto", only_old).image_target == "cpu"
    unknown = GpuScan((GpuInfo(0),), "/dev", "")  # a device node only: taken
    assert resolve_target("auto", unknown).gpus == (0,)


def test_the_minimum_compute_capability_is_the_flags() -> None:
    """`--min-supported-compute-capability`: 6.0 by default, as tritonserver's."""
    mixed = GpuScan((GpuInfo(0, "GPU-t4", (7, 5)), GpuInfo(1, "GPU-v100", (7, 0)),
                     GpuInfo(2, "GPU-p4", (6, 1)), GpuInfo(3)), "nvml", "")  # fmt: skip
    assert resolve_target("auto", mixed).gpus == (0, 1, 2, 3)
    assert resolve_target("auto", mixed, 7.0).gpus == (0, 1, 3)  # 7.0 is supported at 7.0
    assert resolve_target("auto", mixed, 7.5).gpus == (0, 3)  # unknown (node only): taken
    assert unsupported_gpus(mixed, 7.5) == frozenset({1, 2})
    assert unsupported_gpus(mixed, 0) == frozenset()
    only_old = GpuScan((GpuInfo(0, "GPU-p4", (6, 1)),), "nvml", "")
    assert resolve_target("auto", only_old, 8.0).reason == "no GPU of compute capability >= 8"
    assert resolve_target("auto", only_old, 5.3).gpus == (0,)


def test_cpu_and_cuda_are_taken_as_asked() -> None:
    assert resolve_target("cpu", TWO).gpus == () and not resolve_target("cpu", TWO).cuda
    assert resolve_target("cuda:sm_90", NONE) == DeviceTarget(
        "cuda:sm_90", (0,), "cuda:sm_90", "--target cuda:sm_90"
    )
    assert resolve_target("cuda", TWO).gpus == (0, 1)


def test_this_machine_has_no_gpu_so_auto_is_cpu() -> None:
    assert local_target("auto").image_target == "cpu"
    assert local_target("cpu").reason == "--target cpu"


def _groups(repo: Path, name: str, gpus: tuple[int, ...]) -> list[tuple[str, list[int]]]:
    spec = read_model(repo, name, gpu_available=bool(gpus), gpus=gpus)
    kinds = mc.ModelInstanceGroup.Kind
    return [(kinds.Name(g.kind), list(g.gpus)) for g in spec.config.instance_group]


def test_kind_auto_goes_to_every_gpu_found_as_in_triton(tmp_path: Path) -> None:
    make_onnx_add(tmp_path, "auto_add")  # no instance_group: Triton's KIND_AUTO group
    assert _groups(tmp_path, "auto_add", (0, 1)) == [("KIND_GPU", [0, 1])]
    assert _groups(tmp_path, "auto_add", ()) == [("KIND_CPU", [])]
    with (tmp_path / "auto_add" / "config.pbtxt").open("a") as f:
        f.write("instance_group [ { kind: KIND_GPU } ]\n")  # a GPU group naming none: all
    assert _groups(tmp_path, "auto_add", (0, 1)) == [("KIND_GPU", [0, 1])]


class _Machine:
    def __init__(self, caps: Capabilities) -> None:
        self.caps = caps

    def capabilities(self, *, onnxruntime: bool, tensorrt: bool) -> Capabilities:
        return self.caps


async def test_a_model_manager_on_an_auto_target_places_kind_auto_on_the_gpus(
    tmp_path: Path,
) -> None:
    make_onnx_add(tmp_path, "auto_add")
    metrics = Metrics()
    manager = ModelManager(
        ServeConfig(repository=tmp_path, target="auto"),
        metrics=metrics,
        device_target=resolve_target("auto", TWO),
        inventory=_Machine(Capabilities(cuda_devices=2)),  # onnxruntime here has no CUDA EP
    )
    await manager.start()
    try:
        config = manager.config("auto_add", None)
        groups = [(g["kind"], g["gpus"]) for g in config["instance_group"]]
        assert groups == [("KIND_GPU", [0, 1])]
        text = metrics.exposition().decode()
        assert 'reason="no_onnxruntime_cuda"' in text  # then runs on the CPU, counted
    finally:
        await manager.stop()


def test_the_gpu_scan_modules_a_fork_server_imports_start_no_thread() -> None:
    # The zygote imports them for children with a non-cpu `--target` (its rule 2: nothing that
    # starts a thread at import); the scan itself (nvmlInit) runs only in the children.
    import os
    import subprocess
    import sys

    code = (
        "import importlib, os\n"
        "from runtime.process.zygote import _WITH_GPU_SCAN\n"
        "for name in _WITH_GPU_SCAN: importlib.import_module(name)\n"
        "print(len(os.listdir('/proc/self/task')))"
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == 1
