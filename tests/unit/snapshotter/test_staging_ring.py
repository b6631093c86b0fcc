"""The pinned staging ring against a fake device with a real one's async copy semantics."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from snapshotter.device_budget import DeviceMemory, vram_shortfall
from snapshotter.errors import (
    DeviceCopyError,
    DeviceMemoryError,
    IntegrityError,
    RestoreCancelled,
    SnapshotError,
)
from snapshotter.staging_ring import (
    DeviceJob,
    RingStaging,
    StagingPool,
    fitted_ring,
    pread_piece,
    read_from_memory,
    split_pieces,
    stream_to_device,
)
from tests.fakes.fake_device import FakeDevice

SLOT = 4096


@pytest.fixture
def device() -> Iterator[FakeDevice]:
    dev = FakeDevice(copy_delay_s=0.002)
    yield dev
    dev.close()


def _files(tmp_path: Path, sizes: list[int]) -> tuple[list[DeviceJob], bytes]:
    """One file per size, random bytes; jobs laid back to back; the bytes expected on device."""
    rng = np.random.default_rng(1)
    jobs, expected, offset = [], b"", 0
    for i, size in enumerate(sizes):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        path = tmp_path / f"chunk{i}"
        path.write_bytes(b"H" * 10 + data)  # a header before the piece: file_offset matters
        jobs.append(DeviceJob(path, 10, size, offset, f"chunk{i}"))
        expected += data
        offset += size
    return jobs, expected


def _ring(device: FakeDevice, slots: int) -> RingStaging:
    return RingStaging([device.pinned(SLOT) for _ in range(slots)], SLOT)


def test_every_byte_lands_even_when_copies_lag_behind_reads(
    device: FakeDevice, tmp_path: Path
) -> None:
    # Slow copies and two slots: a slot reused before its copy ran would put the next piece's
    # bytes on the device (the fake reads the source when the copy runs, as a DMA does).
    jobs, expected = _files(tmp_path, [3 * SLOT + 17, SLOT, 5, 2 * SLOT])
    dest = device.allocate(len(expected))
    pieces = stream_to_device(jobs, dest, device, _ring(device, 2), threads=4)
    assert pieces == len(split_pieces(jobs, SLOT)) == 8
    assert bytes(dest.numpy()) == expected
    assert device.copied_bytes == len(expected)


def test_the_ring_bounds_copies_in_flight(device: FakeDevice, tmp_path: Path) -> None:
    jobs, expected = _files(tmp_path, [20 * SLOT])
    dest = device.allocate(len(expected))
    stream_to_device(jobs, dest, device, _ring(device, 3), threads=8)
    assert bytes(dest.numpy()) == expected
    assert 1 <= device.max_in_flight <= 3  # back-pressure: readers wait for a free slot


def test_reads_overlap_copies(device: FakeDevice, tmp_path: Path) -> None:
    jobs, _ = _files(tmp_path, [16 * SLOT])
    overlapped = []

    def read(job: DeviceJob, offset: int, view: memoryview) -> None:
        overlapped.append(device.in_flight > 0)
        pread_piece(job, offset, view)

    stream_to_device(jobs, device.allocate(16 * SLOT), device, _ring(device, 4), read=read)
    assert any(overlapped), "no read ever ran while a copy was in flight"


def test_a_failed_copy_fails_the_restore_after_every_copy_finished(tmp_path: Path) -> None:
    device = FakeDevice(copy_delay_s=0.002, fail_copy_at=3)
    try:
        jobs, _ = _files(tmp_path, [12 * SLOT])
        with pytest.raises(DeviceCopyError, match="copy 3"):
            stream_to_device(jobs, device.allocate(12 * SLOT), device, _ring(device, 2))
        assert device.in_flight == 0  # nothing still reads staging memory the caller frees
        assert device.copies < 12  # the others stopped instead of copying everything
    finally:
        device.close()


def test_a_short_file_is_an_integrity_error_naming_the_chunk(
    device: FakeDevice, tmp_path: Path
) -> None:
    jobs, _ = _files(tmp_path, [4 * SLOT])
    short = DeviceJob(jobs[0].path, 10, 8 * SLOT, 0, "chunk0")
    with pytest.raises(IntegrityError, match="chunk0 is truncated"):
        stream_to_device([short], device.allocate(8 * SLOT), device, _ring(device, 2))
    assert device.in_flight == 0


def test_cancel_stops_the_readers_and_drains_the_copies(device: FakeDevice, tmp_path: Path) -> None:
    jobs, _ = _files(tmp_path, [40 * SLOT])
    cancel = threading.Event()
    reads = []

    def read(job: DeviceJob, offset: int, view: memoryview) -> None:
        reads.append(offset)
        if len(reads) == 5:
            cancel.set()
        pread_piece(job, offset, view)

    with pytest.raises(RestoreCancelled):
        stream_to_device(
            jobs, device.allocate(40 * SLOT), device, _ring(device, 2), read=read, cancel=cancel
        )
    assert len(reads) < 40
    assert device.in_flight == 0


def test_pieces_copied_out_of_host_memory_go_through_the_pinned_slots(
    device: FakeDevice, tmp_path: Path
) -> None:
    # A chunk already in host memory (fetched, or hashed there) is never page-locked; each piece
    # is copied into a pinned slot and from there to the device.
    data = np.random.default_rng(3).integers(0, 256, 5 * SLOT + 99, dtype=np.uint8).tobytes()
    held = memoryview(bytearray(100) + bytearray(data))
    dest = device.allocate(len(data))
    job = DeviceJob(tmp_path / "not-read", 100, len(data), 0, "image")
    read = read_from_memory({"image": held}, pread_piece)
    stream_to_device([job], dest, device, _ring(device, 2), threads=3, read=read)
    assert bytes(dest.numpy()) == data
    assert sum(c.nbytes for c in device.copy_log) == len(data)  # every byte once
    assert all(c.from_pinned for c in device.copy_log)  # from the ring's slots only


def test_a_piece_outside_the_host_memory_is_refused(device: FakeDevice, tmp_path: Path) -> None:
    held = memoryview(bytearray(2 * SLOT))
    job = DeviceJob(tmp_path / "not-read", SLOT, 2 * SLOT, 0, "image")  # runs past the end
    read = read_from_memory({"image": held}, pread_piece)
    with pytest.raises(SnapshotError, match="past its"):
        stream_to_device([job], device.allocate(2 * SLOT), device, _ring(device, 2), read=read)
    assert device.in_flight == 0


def test_a_pool_pins_once_and_lends_its_ring_to_one_restore_at_a_time(
    device: FakeDevice,
) -> None:
    pool = StagingPool(slot_bytes=SLOT, slots=3)
    pool.allocate(device)  # what a warm process does before it reports ready
    assert device.pinned_buffers == 3
    with pool.ring(device):
        pass
    with pool.ring(device):
        assert device.pinned_buffers == 3  # reused, not pinned again
        with pool.ring(device):  # a concurrent restore: a ring of its own
            assert device.pinned_buffers == 6
        with pool.ring(device, SLOT):  # ... cut to what its image needs: 2 slots, not 3
            assert device.pinned_buffers == 8


@pytest.mark.parametrize(
    ("nbytes", "shape"),
    [
        (None, (32 << 20, 16)),  # size unknown: the full ring
        (1 << 40, (32 << 20, 16)),  # larger than the ring
        (512 << 20, (32 << 20, 16)),
        (100 << 20, (32 << 20, 4)),  # as many slots as it fills
        (64 << 20, (32 << 20, 2)),
        (40 << 20, (20 << 20, 2)),  # under two slots: two half-size slots
        (4 << 20, (2 << 20, 2)),
        (5000, (4096, 2)),  # page-rounded
        (0, (4096, 2)),
    ],
)
def test_a_ring_pinned_for_one_restore_is_no_bigger_than_its_image(
    nbytes: int | None, shape: tuple[int, int]
) -> None:
    assert fitted_ring(nbytes, 32 << 20, 16) == shape
    slot, slots = shape
    assert nbytes is None or slot * slots <= max(nbytes, 2 * 4096) + slot  # < one slot over


def test_allocation_past_capacity_is_a_device_memory_error() -> None:
    device = FakeDevice(capacity_bytes=10 * SLOT)
    try:
        device.allocate(8 * SLOT)
        with pytest.raises(DeviceMemoryError, match="out of memory"):
            device.allocate(4 * SLOT)
    finally:
        device.close()


@pytest.mark.parametrize(
    ("need", "free", "reusable", "fits"),
    [
        (1 << 30, 2 << 30, 0, True),
        (1 << 30, 1 << 30, 0, False),  # the headroom does not fit beside it
        (1 << 30, 1 << 29, 1 << 30, True),  # a warm process's reserved pool counts as free
        (0, 0, 0, False),
    ],
)
def test_vram_shortfall(need: int, free: int, reusable: int, fits: bool) -> None:
    memory = DeviceMemory(free_bytes=free, total_bytes=80 << 30, reusable_bytes=reusable)
    reason = vram_shortfall(need, memory, headroom_bytes=256 << 20, device="cuda:1")
    assert (reason is None) is fits
    if reason is not None:
        assert reason.startswith("cuda:1 has ") and "headroom" in reason


def test_a_job_with_a_descriptor_reads_that_file_whatever_its_path_holds_now(
    device: FakeDevice, tmp_path: Path
) -> None:
    jobs, expected = _files(tmp_path, [3 * SLOT + 5])
    fd = os.open(jobs[0].path, os.O_RDONLY)
    try:
        other = tmp_path / "other"
        other.write_bytes(b"X" * (3 * SLOT + 15))
        os.replace(other, jobs[0].path)  # the path holds another file now
        job = dataclasses.replace(jobs[0], fd=fd)
        dest = device.allocate(len(expected))
        stream_to_device([job], dest, device, _ring(device, 2), threads=2)
    finally:
        os.close(fd)
    assert bytes(dest.numpy()) == expected


def test_checked_chunks_come_from_host_memory_and_the_others_from_their_files(
    device: FakeDevice, tmp_path: Path
) -> None:
    jobs, expected = _files(tmp_path, [2 * SLOT + 1, SLOT + 7])
    held = memoryview(bytearray(expected[: jobs[0].nbytes]))
    jobs[0].path.unlink()  # checked in host memory: its file is never read again
    first = dataclasses.replace(jobs[0], file_offset=0)
    files: list[str] = []

    def from_file(job: DeviceJob, offset: int, view: memoryview) -> None:
        files.append(job.tag)
        pread_piece(job, offset, view)

    dest = device.allocate(len(expected))
    read = read_from_memory({first.tag: held}, from_file)
    stream_to_device([first, jobs[1]], dest, device, _ring(device, 2), threads=2, read=read)
    assert bytes(dest.numpy()) == expected
    assert set(files) == {jobs[1].tag}
    long = dataclasses.replace(first, nbytes=len(held) + 1)
    with pytest.raises(SnapshotError, match="past its"):
        stream_to_device([long], device.allocate(long.nbytes), device, _ring(device, 2), read=read)
