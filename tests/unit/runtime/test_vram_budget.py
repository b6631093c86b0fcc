"""VRAM for the frameworks' own weight copies: counted per GPU instance, checked before loading."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.config import ServeConfig
from runtime.devices.plan import CUDA_EP, Capabilities, DevicePlan, Placement
from runtime.devices.vram_budget import check_framework_vram, check_load_limits, framework_vram
from runtime.errors import DeviceOutOfMemory
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from snapshotter import DeviceMemory
from tests.fixtures.onnx_models import make_onnx_add

GIB = 1 << 30


def _plan(*placements: tuple[str, int, str]) -> DevicePlan:
    return DevicePlan(
        tuple(Placement("g", i, kind, gpu, restore) for i, (kind, gpu, restore) in
              enumerate(placements))
    )  # fmt: skip


def test_each_session_on_a_gpu_holds_its_own_copy_and_device_images_hold_none() -> None:
    plan = _plan(("KIND_GPU", 0, "cpu"), ("KIND_GPU", 0, "cpu"), ("KIND_GPU", 1, "cpu"),
                 ("KIND_CPU", 0, "cpu"))  # fmt: skip
    assert framework_vram(plan, GIB, frozenset()) == {0: 2 * GIB, 1: GIB}
    torch_views = _plan(("KIND_GPU", 0, "cuda:0"), ("KIND_GPU", 0, "cuda:0"))
    assert framework_vram(torch_views, GIB, frozenset({"cuda:0"})) == {}  # views of the arena
    assert framework_vram(torch_views, GIB, frozenset()) == {0: 2 * GIB}  # restore failed: .to()


def test_copies_that_do_not_fit_fail_before_loading_with_503() -> None:
    free = {0: DeviceMemory(free_bytes=3 * GIB, total_bytes=80 * GIB),
            1: DeviceMemory(free_bytes=GIB, total_bytes=80 * GIB)}  # fmt: skip
    check_framework_vram("m", {0: 2 * GIB}, free.get, headroom_bytes=512 << 20)
    with pytest.raises(DeviceOutOfMemory, match=r"cuda:1 has 1\.00 GiB free") as caught:
        check_framework_vram("m", {0: 2 * GIB, 1: GIB}, free.get, headroom_bytes=512 << 20)
    assert caught.value.status == 503
    check_framework_vram("m", {5: 100 * GIB}, free.get, headroom_bytes=0)  # unknown: unchecked


def test_a_gpu_over_its_load_limit_refuses_the_instance_in_tritons_words() -> None:
    memory = {0: DeviceMemory(free_bytes=30 * GIB, total_bytes=80 * GIB),  # 50 GiB used
              1: DeviceMemory(free_bytes=70 * GIB, total_bytes=80 * GIB)}  # fmt: skip
    read: list[int] = []

    def reader(gpu: int) -> DeviceMemory | None:
        read.append(gpu)
        return memory.get(gpu)

    check_load_limits("m", [0, 1], {0: 0.7, 1: 0.5}, reader)  # 62.5% and 12.5% used
    with pytest.raises(DeviceOutOfMemory) as caught:
        check_load_limits("m", [1, 0, 0], {0: 0.6}, reader)
    assert str(caught.value) == (
        "can not create model 'm': memory limit set for KIND_GPU 0 has exceeded, model loading "
        "is rejected."
    )
    assert read == [0, 1, 0]  # a GPU without a limit is not read
    check_load_limits("m", [5], {5: 0.0}, reader)  # no reading: not checked


async def test_a_load_over_the_gpu_limit_fails_and_the_server_serves_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime.models import version_loader

    busy = DeviceMemory(free_bytes=8 * GIB, total_bytes=80 * GIB)
    monkeypatch.setattr(version_loader, "_nvml_reader", lambda gpu: busy)
    model = make_onnx_add(tmp_path, "gpu_add")
    with (model / "config.pbtxt").open("a") as f:
        f.write("instance_group [ { kind: KIND_GPU count: 1 } ]\n")
    make_onnx_add(tmp_path, "cpu_add")
    config = ServeConfig(repository=tmp_path, model_load_gpu_limits=((0, 0.8),))
    manager = ModelManager(config, metrics=Metrics(), inventory=_Machine())
    await manager.start()
    try:
        rows = {r["name"]: r for r in await manager.index()}
        assert rows["gpu_add"]["state"] == "UNAVAILABLE"
        assert "memory limit set for KIND_GPU 0 has exceeded" in rows["gpu_add"]["reason"]
        assert rows["cpu_add"]["state"] == "READY"
    finally:
        await manager.stop()


class _Machine:
    def capabilities(self, *, onnxruntime: bool, tensorrt: bool) -> Capabilities:
        return Capabilities(cuda_devices=1, ort_providers=frozenset({CUDA_EP}))


async def test_a_load_whose_copies_do_not_fit_is_503_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime.models import version_loader

    tiny = DeviceMemory(free_bytes=1 << 20, total_bytes=80 * GIB)
    monkeypatch.setattr(version_loader, "_nvml_reader", lambda gpu: tiny)
    model = make_onnx_add(tmp_path, "gpu_add")
    with (model / "config.pbtxt").open("a") as f:
        f.write("instance_group [ { kind: KIND_GPU count: 1 } ]\n")
    metrics = Metrics()
    manager = ModelManager(ServeConfig(repository=tmp_path), metrics=metrics, inventory=_Machine())
    await manager.start()
    try:
        (row,) = [r for r in await manager.index() if r["name"] == "gpu_add"]
        assert row["state"] == "UNAVAILABLE" and "weight copies do not fit" in row["reason"]
        text = metrics.exposition().decode()
        assert 'thaw_device_out_of_memory_total{device="cuda:0",model="gpu_add"} 1\n' in text
    finally:
        await manager.stop()
