"""GPU loads on a machine without one: fallbacks, refusals, VRAM and OOM failures stay per load."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from runtime.backends.base import ExecTimings, LoadContext
from runtime.config import ServeConfig
from runtime.devices.plan import CUDA_EP, Capabilities
from runtime.errors import DeviceOutOfMemory, RepositoryError, ServingError
from runtime.inference import InferRequest, InferTensor
from runtime.models.manager import ModelManager
from runtime.models.version_loader import _load_instance
from runtime.observe.metrics import Metrics
from snapshotter import DeviceConfig, ImageLoader, ImageRef, build_image
from snapshotter.stores.dir_store import DirStore
from tests.fakes.fake_device import FakeDevice
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.torch_models import make_torchscript_linear

GPU_GROUP = "instance_group [ { kind: KIND_GPU count: 1 } ]\n"


class FakeInventory:
    """The machine a test says it is."""

    def __init__(self, caps: Capabilities) -> None:
        self.caps = caps
        self.asked = 0

    def capabilities(self, *, onnxruntime: bool, tensorrt: bool) -> Capabilities:
        self.asked += 1
        return self.caps


def _metric(metrics: Metrics, name: str, **labels: str) -> float | None:
    text = metrics.exposition().decode()
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    found = re.search(rf"^{name}{{{re.escape(inner)}}} (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


def _gpu(model_dir: Path, groups: str = GPU_GROUP) -> Path:
    with (model_dir / "config.pbtxt").open("a") as f:
        f.write(groups)
    return model_dir


async def _add(manager: ModelManager, name: str) -> np.ndarray:
    x = np.ones((1, 4), np.float32)
    response = await manager.infer(
        InferRequest(name, "", [InferTensor("INPUT0", "FP32", (1, 4), x)])
    )
    return response.outputs[0].data


async def test_a_gpu_model_without_cuda_serves_on_cpu_and_counts_why(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    _gpu(make_onnx_add(tmp_path, "gpu_add"))
    metrics = Metrics()
    manager = ModelManager(ServeConfig(repository=tmp_path), metrics=metrics)  # the real machine
    await manager.start()
    try:
        assert manager.is_ready()
        assert (await _add(manager, "gpu_add")).shape == (1, 4)
        assert (
            _metric(metrics, "thaw_device_fallbacks_total", model="gpu_add", reason="no_cuda") == 1
        )
    finally:
        await manager.stop()


async def test_onnxruntime_without_its_cuda_ep_falls_back_to_cpu(tmp_path: Path) -> None:
    _gpu(make_onnx_add(tmp_path, "gpu_add"))
    metrics = Metrics()
    inventory = FakeInventory(Capabilities(cuda_devices=1))  # a GPU; onnxruntime CPU-only
    manager = ModelManager(ServeConfig(repository=tmp_path), metrics=metrics, inventory=inventory)
    await manager.start()
    try:
        assert (await _add(manager, "gpu_add")).shape == (1, 4)
        reason = "no_onnxruntime_cuda"
        assert _metric(metrics, "thaw_device_fallbacks_total", model="gpu_add", reason=reason) == 1
    finally:
        await manager.stop()


async def test_a_cpu_model_never_inspects_the_machine(tmp_path: Path) -> None:
    make_onnx_add(tmp_path, "cpu_add")
    inventory = FakeInventory(Capabilities())
    manager = ModelManager(ServeConfig(repository=tmp_path), metrics=Metrics(), inventory=inventory)
    await manager.start()
    try:
        assert manager.is_ready() and inventory.asked == 0
    finally:
        await manager.stop()


async def test_a_gpu_this_machine_lacks_fails_that_load_only(tmp_path: Path) -> None:
    _gpu(make_onnx_add(tmp_path, "far_gpu"), "instance_group [ { kind: KIND_GPU gpus: [ 3 ] } ]\n")
    make_onnx_add(tmp_path, "near")
    caps = Capabilities(cuda_devices=1, ort_providers=frozenset({CUDA_EP}))
    manager = ModelManager(
        ServeConfig(repository=tmp_path), metrics=Metrics(), inventory=FakeInventory(caps)
    )
    await manager.start()
    try:
        rows = {row["name"]: row for row in await manager.index()}
        assert rows["far_gpu"]["state"] == "UNAVAILABLE"
        assert "asks for GPU 3, and this machine has 1" in rows["far_gpu"]["reason"]
        assert (await _add(manager, "near")).shape == (1, 4)
    finally:
        await manager.stop()


@pytest.fixture
def device() -> Iterator[FakeDevice]:
    dev = FakeDevice(copy_delay_s=0.0)
    yield dev
    dev.close()


def _images(tmp_path: Path, device: FakeDevice) -> tuple[Path, ImageLoader]:
    repo = tmp_path / "repo"
    _gpu(make_torchscript_linear(repo, "big_linear", features=64))
    make_onnx_add(repo, "small_cpu")
    cache = tmp_path / "cache"
    build_image(repo / "big_linear" / "1", DirStore(cache))
    loader = ImageLoader(
        None, cache, "cpu", device=DeviceConfig(headroom_bytes=0),
        copier_factory=lambda _: device, device_memory=device,
    )  # fmt: skip
    return repo, loader


async def test_a_restore_that_does_not_fit_fails_that_load_with_503(
    tmp_path: Path, device: FakeDevice
) -> None:
    repo, loader = await asyncio.to_thread(_images, tmp_path, device)
    device.free_bytes_reading = 1024  # the GPU is nearly full
    metrics = Metrics()
    caps = Capabilities(cuda_devices=1)
    manager = ModelManager(
        ServeConfig(repository=repo, model_control_mode="explicit"),  # type: ignore[arg-type]
        metrics=metrics, image_loader=loader, inventory=FakeInventory(caps),
    )  # fmt: skip
    await manager.start()
    try:
        with pytest.raises(DeviceOutOfMemory) as info:
            await manager.load("big_linear")
        assert info.value.status == 503
        assert "not enough free device memory" in info.value.message
        assert device.allocated_bytes == 0
        oom = _metric(
            metrics, "thaw_device_out_of_memory_total", device="cuda:0", model="big_linear"
        )
        assert oom == 1
        await manager.load("small_cpu")  # the server goes on, other models load and serve
        assert (await _add(manager, "small_cpu")).shape == (1, 4)
    finally:
        await manager.stop()


async def test_restores_once_per_distinct_device_of_the_instance_groups(
    tmp_path: Path, device: FakeDevice
) -> None:
    repo, loader = await asyncio.to_thread(_images, tmp_path, device)
    config = repo / "big_linear" / "config.pbtxt"
    config.write_text(
        config.read_text().replace(
            GPU_GROUP,
            "instance_group [ { kind: KIND_GPU count: 3 gpus: [ 0, 1 ] }, { kind: KIND_CPU } ]\n",
        )
    )
    restored: list[str | None] = []
    original = loader.restore

    def recording(ref: ImageRef, arena: object = None, *, device: str | None = None) -> object:
        restored.append(device)
        return original(ref, arena, device=device)  # type: ignore[arg-type]

    loader.restore = recording  # type: ignore[method-assign]
    manager = ModelManager(
        ServeConfig(repository=repo, model_control_mode="explicit"),  # type: ignore[arg-type]
        metrics=Metrics(), image_loader=loader,
        inventory=FakeInventory(Capabilities(cuda_devices=2)),
    )  # fmt: skip
    await manager.start()
    try:
        # The fake GPUs restore; this machine's torch then cannot run KIND_GPU instances.
        with pytest.raises(RepositoryError, match="CUDA is unavailable"):
            await manager.load("big_linear")
        assert restored == ["cuda:0", "cuda:1", None]  # None: the host restore (KIND_CPU)
    finally:
        await manager.stop()


class _OomOnLoad:
    gil_bound = False
    used_image = False
    timings = ExecTimings()

    def load(self, ctx: LoadContext) -> None:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    def execute(self, requests: list[InferRequest]) -> list[object]:
        return []

    def unload(self) -> None:
        pass


def test_cuda_oom_while_loading_an_instance_is_that_loads_503(tmp_path: Path) -> None:
    from tritonconfig import parse_config

    config = parse_config('name: "m" backend: "pytorch"', "config.pbtxt")
    ctx = LoadContext("m", "1", tmp_path, tmp_path, config, "KIND_GPU", 2, instance_name="m_0")
    with pytest.raises(DeviceOutOfMemory, match="cuda:2 ran out of memory while loading"):
        _load_instance(_OomOnLoad(), ctx)  # type: ignore[arg-type]
    cpu_ctx = LoadContext("m", "1", tmp_path, tmp_path, config, "KIND_CPU", 0)
    with pytest.raises(RepositoryError):  # on a CPU instance it is no device error
        _load_instance(_OomOnLoad(), cpu_ctx)  # type: ignore[arg-type]


def test_a_request_that_runs_the_gpu_out_of_memory_fails_alone() -> None:
    from runtime.devices.errors import device_failure, is_device_oom

    oom = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")
    error = device_failure("m", oom, device="cuda:0")
    assert isinstance(error, DeviceOutOfMemory) and error.status == 503
    assert "cuda:0 ran out of memory for this request" in error.message
    ort_text = RuntimeError(
        "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : CUDA failure 2: out of memory"
    )
    assert is_device_oom(ort_text)
    assert not is_device_oom(MemoryError())  # host memory is not the GPU's
    plain = device_failure("m", ValueError("shape mismatch"), device="cuda:0")
    assert type(plain) is ServingError and plain.status == 500
