"""A fake GPU for the restore path: a `DeviceCopier` with a real device's asynchronous semantics.

Device memory is a CPU torch tensor (so `device_views` and backends can read it); copies run in
order on one worker thread (the "stream"), after `copy_delay_s`, and read their source only
when they run, as a DMA does: a staging buffer overwritten before its copy completed shows up as
wrong bytes on the device. Faults: a memory `capacity_bytes` (allocation past it is CUDA's out
of memory), `fail_copy_at` (that copy, counted from 0, fails), `free_bytes_reading` (what the
driver would report free). It counts what tests assert on: copies, bytes, the most copies in
flight at once, pinned buffers, and a log of every copy (its size and whether its source was
pinned by this device, or host memory handed to `wrap_host`).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from snapshotter.device_budget import DeviceMemory
from snapshotter.errors import DeviceCopyError, DeviceMemoryError


class FakePinned:
    """Host memory handed to the fake device (`view` is what a copy reads); `pinned`: made by
    `pinned()`, not wrapped by `wrap_host()` (which a real device copies at pinned speed only
    if the memory was page-locked beforehand)."""

    def __init__(self, view: memoryview, *, pinned: bool) -> None:
        self.view = view
        self.pinned = pinned


@dataclass(frozen=True)
class CopyRecord:
    """One copy as the log keeps it."""

    nbytes: int
    dst_offset: int
    from_pinned: bool


@dataclass
class FakeCopy:
    """One queued copy; `wait` blocks until the fake stream ran it."""

    src: FakePinned
    src_offset: int
    nbytes: int
    dst: Any
    dst_offset: int
    index: int
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def wait(self) -> None:
        if not self.done.wait(timeout=30):
            raise AssertionError("a fake copy never completed (the fake stream is stuck)")
        if self.error is not None:
            raise self.error


class FakeDevice:
    """One fake GPU; `close()` stops its stream thread."""

    def __init__(
        self,
        device: str = "cuda:0",
        *,
        capacity_bytes: int = 1 << 34,
        copy_delay_s: float = 0.0,
        fail_copy_at: int | None = None,
        free_bytes_reading: int | None = None,
    ) -> None:
        self.device = device
        self.capacity_bytes = capacity_bytes
        self.copy_delay_s = copy_delay_s
        self.fail_copy_at = fail_copy_at
        self.free_bytes_reading = free_bytes_reading
        self.allocated_bytes = 0
        self.copies = 0
        self.copied_bytes = 0
        self.pinned_buffers = 0
        self.max_in_flight = 0
        self.copy_log: list[CopyRecord] = []
        self._in_flight = 0
        self._lock = threading.Lock()
        self._stream: queue.Queue[FakeCopy | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="fake-stream", daemon=True)
        self._thread.start()

    # -- DeviceCopier -------------------------------------------------------------------
    def allocate(self, nbytes: int) -> Any:
        with self._lock:
            if self.allocated_bytes + nbytes > self.capacity_bytes:
                raise DeviceMemoryError(
                    f"{self.device} ran out of memory allocating {nbytes} bytes (fake)"
                )
            self.allocated_bytes += nbytes
        return torch.zeros(max(nbytes, 1), dtype=torch.uint8)

    def pinned(self, nbytes: int) -> FakePinned:
        with self._lock:
            self.pinned_buffers += 1
        return FakePinned(memoryview(bytearray(max(nbytes, 1))), pinned=True)

    def wrap_host(self, view: memoryview) -> FakePinned:
        return FakePinned(view, pinned=False)

    def copy(
        self, src: FakePinned, src_offset: int, nbytes: int, dst: Any, dst_offset: int
    ) -> FakeCopy:
        with self._lock:
            job = FakeCopy(src, src_offset, nbytes, dst, dst_offset, self.copies)
            self.copies += 1
            self.copy_log.append(CopyRecord(nbytes, dst_offset, src.pinned))
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        self._stream.put(job)
        return job

    def synchronize(self) -> None:
        marker = FakeCopy(FakePinned(memoryview(b""), pinned=True), 0, 0, None, 0, -1)
        with self._lock:
            self._in_flight += 1
        self._stream.put(marker)
        marker.wait()

    # -- DeviceMemorySource -------------------------------------------------------------
    def memory(self, device: str) -> DeviceMemory:
        free = self.capacity_bytes - self.allocated_bytes
        if self.free_bytes_reading is not None:
            free = self.free_bytes_reading
        return DeviceMemory(free_bytes=free, total_bytes=self.capacity_bytes)

    # -- test helpers -------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def close(self) -> None:
        self._stream.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            job = self._stream.get()
            if job is None:
                return
            if job.dst is not None:
                time.sleep(self.copy_delay_s)
                if job.index == self.fail_copy_at:
                    job.error = DeviceCopyError(f"copy {job.index} to {self.device} failed (fake)")
                else:
                    # Read the source now, as a DMA does: not when the copy was queued.
                    data = bytes(job.src.view[job.src_offset : job.src_offset + job.nbytes])
                    job.dst[job.dst_offset : job.dst_offset + job.nbytes] = torch.frombuffer(
                        bytearray(data), dtype=torch.uint8
                    )
                    with self._lock:
                        self.copied_bytes += job.nbytes
            with self._lock:
                self._in_flight -= 1
            job.done.set()
