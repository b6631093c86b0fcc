"""`ImageLoader.restore(..., device=...)` on a fake GPU: bytes, VRAM budget, OOM, host tier, and
chunk files replaced or rewritten between the marker check and the ring's read."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from snapshotter import Arena, ImageLoader, build_image
from snapshotter.cuda_copier import cuda_available
from snapshotter.cuda_restore import DeviceConfig
from snapshotter.device_restore import DeviceSettings
from snapshotter.errors import DeviceMemoryError, IntegrityError, SnapshotError
from snapshotter.image_ref import ImageRef
from snapshotter.staging_ring import DeviceJob, ReadFn, pread_piece
from snapshotter.stores.dir_store import DirStore
from tests.fakes.fake_device import FakeDevice
from tests.fixtures.torch_models import make_torchscript_linear

REF = ImageRef("torch_linear", "1", "cpu")
SMALL = DeviceConfig(slot_bytes=256, ring_slots=2, read_threads=2, headroom_bytes=0)


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
        device_memory=device, **kwargs,  # type: ignore[arg-type]
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


def _kept(loader: ImageLoader, timeout_s: float = 20.0) -> None:
    """Wait until the host tier has published an image (it does in the background)."""
    deadline = time.monotonic() + timeout_s
    while not loader.host.entries():
        assert time.monotonic() < deadline, "the host tier never kept the image"
        time.sleep(0.02)


def _tiered(cache: Path, device: FakeDevice, tier: Path, **kwargs: object) -> ImageLoader:
    return _loader(
        cache, device, host_cache_dir=tier, host_max_bytes=1 << 30, host_publish_delay_s=0.0,
        **kwargs,
    )  # fmt: skip


def test_a_wake_from_the_host_tier_copies_each_byte_once_from_pinned_memory(
    cache: Path, device: FakeDevice, tmp_path: Path
) -> None:
    tier = tmp_path / "tier"
    first = _tiered(cache, device, tier).restore(REF, device="cuda:0")
    assert first.source == "cache"
    _kept(_tiered(cache, device, tier))  # published from the cache's verified chunk files
    reads: list[str] = []

    def read(job: DeviceJob, offset: int, view: memoryview) -> None:
        reads.append(job.tag)
        pread_piece(job, offset, view)

    before = len(device.copy_log)
    # Another process's loader on the same tier: it maps the kept image.
    second = _tiered(cache, device, tier, device_read=read).restore(REF, device="cuda:0")
    assert second.source == "host"
    wake = device.copy_log[before:]
    assert sum(c.nbytes for c in wake) == first.manifest.arena_bytes  # one pass over the image
    assert all(c.from_pinned for c in wake)  # through the pinned ring; the mapping is not pinned
    assert reads == []  # no chunk file read, no hash: the bytes come from the mapping
    for name, view in first.torch_tensors().items():
        assert torch.equal(second.torch_tensors()[name], view), name


def test_an_image_a_host_restore_kept_wakes_a_gpu_from_the_tier(
    tmp_path: Path, device: FakeDevice
) -> None:
    # A cuda target's image restored on the host (an execution provider that copies host
    # weights itself) is kept too; a later restore of it into a GPU reads it from the tier.
    model = make_torchscript_linear(tmp_path / "repo", features=16)
    build_image(model / "1", DirStore(tmp_path / "cache"), target="cuda:sm_90")
    ref = ImageRef("torch_linear", "1", "cuda:sm_90")

    def loader() -> ImageLoader:
        return ImageLoader(
            None, tmp_path / "cache", "cuda:sm_90", host_cache_dir=tmp_path / "tier",
            host_max_bytes=1 << 30, host_publish_delay_s=0.0, device=SMALL,
            copier_factory=lambda _: device, device_memory=device,
        )  # fmt: skip

    host = loader().restore(ref)
    assert host.source == "cache" and device.copies == 0
    _kept(loader())
    image = loader().restore(ref, device="cuda:0")
    assert image.source == "host" and all(c.from_pinned for c in device.copy_log)
    for name, tensor in host.torch_tensors().items():
        assert torch.equal(image.torch_tensors()[name], tensor), name


def test_chunks_with_a_stale_marker_are_checked_through_the_given_arena(
    cache: Path, device: FakeDevice
) -> None:
    store = DirStore(cache)
    manifest = ImageLoader(None, cache, "cpu").manifest(REF)
    chunk = manifest.chunks[0]
    later = time.time() + 5
    os.utime(store.chunk_file(chunk.digest), (later, later))  # its verified marker is stale now
    arena = Arena(manifest.arena_bytes)
    image = _loader(cache, device).restore(REF, arena=arena, device="cuda:0")
    assert image.source == "cache"
    assert bytes(arena.array[: chunk.size]) == store.chunk_file(chunk.digest).read_bytes()
    assert store.is_verified(chunk.digest, chunk.size)  # hashed once, marked again


def test_a_directory_store_streams_to_the_gpu_in_place(tmp_path: Path, device: FakeDevice) -> None:
    model = make_torchscript_linear(tmp_path / "repo", features=64)
    build_image(model / "1", DirStore(tmp_path / "store"), max_chunk_bytes=4096)
    loader = ImageLoader(
        str(tmp_path / "store"), tmp_path / "cache", "cpu", device=SMALL,
        copier_factory=lambda _: device, device_memory=device,
    )  # fmt: skip
    image = loader.restore(REF, device="cuda:0")
    host = ImageLoader(str(tmp_path / "store"), None, "cpu").restore(REF).torch_tensors()
    for name, tensor in host.items():
        assert torch.equal(image.torch_tensors()[name], tensor), name
    cache = DirStore(tmp_path / "cache")
    assert all(cache.chunk_size(c.digest) is None for c in image.manifest.chunks)  # in place


def _swap_on_first_read(path: Path, tag: str, change: Callable[[Path], None]) -> ReadFn:
    """A ring reader that runs `change(path)` just before the first piece of chunk `tag` is
    read: after the restore decided to trust the chunk, before its bytes reach the device."""
    done = threading.Event()
    lock = threading.Lock()

    def read(job: DeviceJob, offset: int, view: memoryview) -> None:
        with lock:
            if job.tag == tag and not done.is_set():
                change(path)
                done.set()
        pread_piece(job, offset, view)

    return read


def _replace(path: Path) -> None:
    """Another fill or a GC renames other bytes over the chunk's path (a new inode)."""
    other = path.with_name(path.name + ".other")
    other.write_bytes(bytes(255 - b for b in path.read_bytes()))
    os.replace(other, path)


def _rewrite_in_place(path: Path) -> None:
    """The same file (inode) rewritten with other bytes; its mtime moves."""
    data = path.read_bytes()
    with path.open("r+b") as f:
        f.write(bytes(255 - b for b in data))
    later = time.time() + 7
    os.utime(path, (later, later))


def test_a_chunk_replaced_after_its_marker_was_checked_is_never_copied(
    cache: Path, device: FakeDevice
) -> None:
    host = ImageLoader(None, cache, "cpu").restore(REF).torch_tensors()
    chunk = ImageLoader(None, cache, "cpu").manifest(REF).chunks[0]
    path = DirStore(cache).chunk_file(chunk.digest)
    read = _swap_on_first_read(path, chunk.digest, _replace)
    image = _loader(cache, device, device_read=read).restore(REF, device="cuda:0")
    # The ring read the file whose marker was checked (its descriptor), not the new one.
    for name, tensor in host.items():
        assert torch.equal(image.torch_tensors()[name], tensor), name


def test_a_chunk_rewritten_in_place_while_the_ring_reads_it_fails_the_restore(
    cache: Path, device: FakeDevice
) -> None:
    chunk = ImageLoader(None, cache, "cpu").manifest(REF).chunks[0]
    path = DirStore(cache).chunk_file(chunk.digest)
    read = _swap_on_first_read(path, chunk.digest, _rewrite_in_place)
    with pytest.raises(IntegrityError, match=f"chunk {chunk.digest} changed while it was read"):
        _loader(cache, device, device_read=read).restore(REF, device="cuda:0")


def test_a_chunk_hashed_in_host_memory_goes_to_the_device_from_there(
    cache: Path, device: FakeDevice
) -> None:
    host = ImageLoader(None, cache, "cpu").restore(REF).torch_tensors()
    chunk = ImageLoader(None, cache, "cpu").manifest(REF).chunks[0]
    path = DirStore(cache).chunk_file(chunk.digest)
    later = time.time() + 5
    os.utime(path, (later, later))  # a stale marker: the chunk is hashed through host memory
    swapped: list[str] = []

    def read(job: DeviceJob, offset: int, view: memoryview) -> None:
        if job.tag == chunk.digest and not swapped:
            swapped.append(job.tag)
            _replace(path)  # the hashed file's path holds other bytes now
        pread_piece(job, offset, view)

    image = _loader(cache, device, device_read=read).restore(REF, device="cuda:0")
    assert swapped == []  # never read from its path again: copied from the hashed bytes
    for name, tensor in host.items():
        assert torch.equal(image.torch_tensors()[name], tensor), name


def test_verify_full_hashes_every_chunk_before_the_device_gets_it(
    cache: Path, device: FakeDevice
) -> None:
    chunk = ImageLoader(None, cache, "cpu").manifest(REF).chunks[0]
    path = DirStore(cache).chunk_file(chunk.digest)
    before = path.stat()
    _rewrite_in_place(path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # its marker still matches
    assert DirStore(cache).is_verified(chunk.digest, chunk.size)
    with pytest.raises(IntegrityError, match=chunk.digest):  # no store to fetch it again from
        _loader(cache, device, verify="full").restore(REF, device="cuda:0")


def test_a_gpu_restore_without_a_node_cache_is_refused(tmp_path: Path, device: FakeDevice) -> None:
    model = make_torchscript_linear(tmp_path / "repo", features=16)
    build_image(model / "1", DirStore(tmp_path / "store"))
    loader = ImageLoader(
        str(tmp_path / "store"), None, "cpu", device=SMALL, copier_factory=lambda _: device,
        device_memory=device,
    )  # fmt: skip
    with pytest.raises(SnapshotError, match="restoring to a GPU reads from the node cache"):
        loader.restore(REF, device="cuda:0")
    assert device.allocated_bytes == 0 and device.copies == 0


@pytest.mark.skipif(cuda_available()[0], reason="CUDA is here: the default copier would work")
def test_without_a_copier_factory_the_restore_asks_cuda_and_says_why_it_cannot(
    cache: Path,
) -> None:
    why = re.escape(f"target device cuda:0: {cuda_available()[1]}")
    with pytest.raises(SnapshotError, match=why):
        ImageLoader(None, cache, "cpu").restore(REF, device="cuda:0")


def test_free_device_memory_is_read_from_the_injected_source_else_the_cuda_copier(
    device: FakeDevice,
) -> None:
    factory = lambda _: device  # noqa: E731
    # The CUDA copier reads its own device's memory; an injected copier's budget is read only
    # from a source given with it (none: the allocation alone decides).
    assert DeviceSettings().memory_source(device) is device
    assert DeviceSettings(copier_factory=factory).memory_source(device) is None
    given = DeviceSettings(copier_factory=factory, device_memory=device)
    assert given.copier("cuda:0") is device and given.memory_source(object()) is device


def test_ring_readers_follow_the_cpus_from_4_to_16() -> None:
    from snapshotter.cuda_restore import default_read_threads

    assert [default_read_threads(n) for n in (1, 2, 4, 8, 16, 64)] == [4, 4, 4, 8, 16, 16]
    assert DeviceConfig().read_threads == default_read_threads()
    # the pinned memory a restore pins for itself when no pool is lent: 16 x 32 MiB
    assert DeviceConfig().slot_bytes * DeviceConfig().ring_slots == 512 << 20
