"""`ImageLoader.restore(..., device=...)` on a fake GPU: bytes, VRAM budget, OOM, host tier."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from snapshotter import ImageLoader, build_image
from snapshotter.cuda_restore import DeviceConfig
from snapshotter.errors import DeviceMemoryError
from snapshotter.image_ref import ImageRef
from snapshotter.stores.dir_store import DirStore
from tests.fakes.fake_device import FakeDevice
from tests.fixtures.models import make_torchscript_linear

REF = ImageRef("torch_linear", "1", "cpu")
SMALL = DeviceConfig(
    slot_bytes=256, ring_slots=2, read_threads=2, piece_bytes=256, headroom_bytes=0
)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    model = make_torchscript_linear(tmp_path / "repo", features=64)
    build_image(model / "1", DirStore(tmp_path / "cache"), max_chunk_bytes=4096)
    return tmp_path / "cache"


@pytest.fixture
def device() -> Iterator[FakeDevice]:
    dev = FakeDevice(copy_delay_s=0.001)
    yield dev
    dev.close()


def _loader(cache: Path, device: FakeDevice, **kwargs: object) -> ImageLoader:
    return ImageLoader(
        None, cache, "cpu", device=SMALL, copier_factory=lambda _: device,
        device_memory=device, pinner=device.pin, **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def test_device_views_hold_the_same_weights_as_a_host_restore(
    cache: Path, device: FakeDevice
) -> None:
    host = ImageLoader(None, cache, "cpu").restore(REF).torch_tensors()
    image = _loader(cache, device).restore(REF, device="cuda:0")
    assert image.device == "cuda:0" and image.tensors == {} and image.source == "cache"
    views = image.torch_tensors()
    assert set(views) == set(host)
    for name, tensor in host.items():
        assert torch.equal(views[name], tensor), name
    assert device.copies > len(host)  # pieces of 256 bytes: through the ring, not one copy
    assert device.max_in_flight <= SMALL.ring_slots


def test_the_budget_refuses_before_allocating(cache: Path, device: FakeDevice) -> None:
    device.free_bytes_reading = 1024  # the driver says almost nothing is free
    with pytest.raises(DeviceMemoryError, match="not enough free device memory"):
        _loader(cache, device).restore(REF, device="cuda:0")
    assert device.allocated_bytes == 0 and device.copies == 0


def test_out_of_memory_during_allocation_is_a_device_memory_error(cache: Path) -> None:
    device = FakeDevice(capacity_bytes=1024)
    try:
        loader = ImageLoader(None, cache, "cpu", device=SMALL, copier_factory=lambda _: device)
        with pytest.raises(DeviceMemoryError, match="ran out of memory"):
            loader.restore(REF, device="cuda:0")  # no budget source: the allocator refuses
    finally:
        device.close()


def test_the_host_tier_is_pinned_and_a_wake_from_it_is_one_copy(
    cache: Path, device: FakeDevice
) -> None:
    loader = _loader(cache, device, host_retention_s=60.0, host_max_bytes=1 << 30)
    first = loader.restore(REF, device="cuda:0")
    assert first.source == "cache"
    assert len(device.registered) == 1  # the kept arena is page-locked for CUDA
    copies = device.copies
    second = loader.restore(REF, device="cuda:0")
    assert second.source == "host"
    assert device.copies == copies + 1  # one host-to-device copy of the whole arena
    for name, view in first.torch_tensors().items():
        assert torch.equal(second.torch_tensors()[name], view), name


def test_a_host_restore_for_a_cuda_target_pins_the_kept_arena(tmp_path: Path) -> None:
    model = make_torchscript_linear(tmp_path / "repo", features=16)
    build_image(model / "1", DirStore(tmp_path / "cache"), target="cuda:sm_90")
    pinned: list[object] = []
    loader = ImageLoader(
        None, tmp_path / "cache", "cuda:sm_90", host_retention_s=60.0, host_max_bytes=1 << 30,
        pinner=lambda arena: pinned.append(arena) is None,
    )  # fmt: skip
    image = loader.restore(ImageRef("torch_linear", "1", "cuda:sm_90"))
    assert pinned == [image.arena]
