"""Stream file pieces into one device arena through pinned staging, reads overlapped with copies.

    pieces ─▶ N reader threads ─▶ take a staging buffer ─▶ preadv into it ─▶ async copy to the
              (a shared queue)     (ring: wait for a free   (pinned host      device (one stream)
                                   slot whose last copy     memory)           ─▶ give the buffer
                                   has completed)                             back with its copy

The device side is a `DeviceCopier` (the CUDA one is `cuda_copier.TorchCudaCopier`; tests use a
fake with the same asynchronous semantics), so ordering, back-pressure, error propagation and
cancellation are the same code on every machine.

`RingStaging`: `slots` pinned buffers of `slot_bytes`, reused. A slot is handed out again only
after the copy out of it has completed (its `CopyDone.wait()`), so at most `slots` pieces are
read but not yet on the device: pinned memory stays bounded and a reader that gets ahead of PCIe
waits (back-pressure). A piece is read from its job's file (`pread_piece`: the descriptor the
job carries, opened when its verified marker was checked, else its path), or copied out of host
memory that already holds the chunk (`read_from_memory`: bytes checked there first).

Whatever fails first (a read, a copy, a cancel) stops the other readers; before the error is
raised every copy already started has finished, since a DMA may still be reading staging memory
that the caller would otherwise free or reuse.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from snapshotter.errors import IntegrityError, RestoreCancelled, SnapshotError

__all__ = [
    "CopyDone",
    "DeviceCopier",
    "DeviceJob",
    "Piece",
    "PinnedBuffer",
    "RingStaging",
    "StagingPool",
    "fitted_ring",
    "pread_piece",
    "read_from_memory",
    "split_pieces",
    "stream_to_device",
]

# How often a reader blocked on a full ring looks at the stop and cancel flags.
_POLL_S = 0.02


@dataclass(frozen=True)
class DeviceJob:
    """Copy `nbytes` of `path` from `file_offset` to `device_offset` of the device arena.

    `fd`, when given, is a descriptor of the file to read instead of opening `path`: the file
    whose verified marker was checked (`chunk_trust.OpenedChunks`), even if the path has been
    replaced since. The caller keeps it open until the ring is done."""

    path: Path
    file_offset: int
    nbytes: int
    device_offset: int
    tag: str
    fd: int | None = None


@dataclass(frozen=True)
class Piece:
    """At most one staging buffer's worth of a job: `offset` bytes into it."""

    job: DeviceJob
    offset: int
    nbytes: int

    @property
    def device_offset(self) -> int:
        return self.job.device_offset + self.offset


class PinnedBuffer(Protocol):
    """Page-locked host memory a device copy can read asynchronously."""

    @property
    def view(self) -> memoryview:
        """Its bytes, writable."""
        ...


class CopyDone(Protocol):
    """One asynchronous host-to-device copy."""

    def wait(self) -> None:
        """Return once the copy has completed; raise DeviceCopyError if it failed."""
        ...


class DeviceCopier(Protocol):
    """One device's side of a restore (allocation, pinned host memory, async copies)."""

    device: str

    def allocate(self, nbytes: int) -> Any:
        """A device buffer of `nbytes`; DeviceMemoryError when the device has no room."""
        ...

    def pinned(self, nbytes: int) -> PinnedBuffer:
        """A new page-locked host buffer of `nbytes`."""
        ...

    def wrap_host(self, view: memoryview) -> PinnedBuffer:
        """Existing host memory as a copy source (page-locked already, for full speed)."""
        ...

    def copy(
        self, src: PinnedBuffer, src_offset: int, nbytes: int, dst: Any, dst_offset: int
    ) -> CopyDone:
        """Start copying `src[src_offset:+nbytes]` to `dst[dst_offset:+nbytes]`; returns at once."""
        ...

    def synchronize(self) -> None:
        """Wait for every copy this copier started."""
        ...


@dataclass
class _Stage:
    """Where one piece is staged: `buffer[offset:offset + nbytes]`; `slot` for the ring."""

    buffer: PinnedBuffer
    offset: int
    slot: _Slot | None = None


@dataclass
class _Slot:
    buffer: PinnedBuffer
    pending: CopyDone | None = None


class RingStaging:
    """A ring of reused pinned buffers (see the module docstring); `piece_bytes` = slot size."""

    def __init__(self, buffers: list[PinnedBuffer], slot_bytes: int) -> None:
        if not buffers or slot_bytes <= 0:
            raise SnapshotError("a staging ring needs at least one slot of at least one byte")
        self.piece_bytes = slot_bytes
        self._slots = [_Slot(b) for b in buffers]
        self._free: queue.Queue[_Slot] = queue.Queue()
        for slot in self._slots:
            self._free.put(slot)

    def take(self, piece: Piece, stopped: Callable[[], bool]) -> _Stage | None:
        """A free slot whose previous copy has completed, or None once `stopped()`."""
        while True:
            try:
                slot = self._free.get(timeout=_POLL_S)
            except queue.Empty:
                if stopped():
                    return None
                continue
            if slot.pending is not None:
                pending, slot.pending = slot.pending, None
                try:
                    pending.wait()  # the DMA out of this slot must finish before we overwrite it
                except BaseException:
                    self._free.put(slot)
                    raise
            return _Stage(slot.buffer, 0, slot)

    def give_back(self, stage: _Stage, copy: CopyDone | None) -> None:
        if stage.slot is None:
            raise SnapshotError("a stage that did not come from this ring")
        stage.slot.pending = copy
        self._free.put(stage.slot)

    def drain(self) -> BaseException | None:
        """Wait for every copy still reading from a slot; the first failure, if any."""
        first: BaseException | None = None
        for slot in self._slots:
            pending, slot.pending = slot.pending, None
            if pending is None:
                continue
            try:
                pending.wait()
            except SnapshotError as exc:
                first = first or exc
        return first


class StagingPool:
    """Pinned ring buffers allocated once (a warm process does it before it reports ready) and
    lent to one restore at a time; a restore that finds them lent allocates its own ring."""

    def __init__(self, *, slot_bytes: int, slots: int) -> None:
        if slot_bytes <= 0 or slots <= 0:
            raise SnapshotError(
                f"`slot_bytes` = {slot_bytes}, `slots` = {slots}: both must be >= 1"
            )
        self.slot_bytes, self.slots = slot_bytes, slots
        self._buffers: list[PinnedBuffer] = []
        self._lock = threading.Lock()
        self._lent = False

    @property
    def nbytes(self) -> int:
        return self.slot_bytes * self.slots

    @property
    def allocated(self) -> bool:
        return bool(self._buffers)

    def allocate(self, copier: DeviceCopier) -> None:
        """Pin the buffers now (idempotent)."""
        with self._lock:
            if not self._buffers:
                self._buffers = [copier.pinned(self.slot_bytes) for _ in range(self.slots)]

    @contextmanager
    def ring(self, copier: DeviceCopier, nbytes: int | None = None) -> Iterator[RingStaging]:
        """This pool's ring for one restore of `nbytes`, or, if it is lent, a fresh ring of its
        shape cut to what `nbytes` needs (`fitted_ring`)."""
        with self._lock:
            mine = not self._lent
            self._lent = self._lent or mine
        try:
            if mine:
                self.allocate(copier)
                yield RingStaging(self._buffers, self.slot_bytes)
            else:
                slot, slots = fitted_ring(nbytes, self.slot_bytes, self.slots)
                yield RingStaging([copier.pinned(slot) for _ in range(slots)], slot)
        finally:
            if mine:
                with self._lock:
                    self._lent = False


ReadFn = Callable[[DeviceJob, int, memoryview], None]

_PAGE = 4096


def fitted_ring(nbytes: int | None, slot_bytes: int, slots: int) -> tuple[int, int]:
    """(slot bytes, slots) of a ring pinned for one restore of `nbytes` (None: unknown, the
    full shape): no more slots than the image fills, and for an image smaller than two slots,
    two slots of half of it (page-rounded), so reads still overlap copies. Pinning is on the
    wake's critical path: a 4 MiB model need not pin 512 MiB."""
    if nbytes is None or nbytes >= slot_bytes * slots:
        return slot_bytes, slots
    if nbytes >= 2 * slot_bytes:
        return slot_bytes, min(slots, -(-nbytes // slot_bytes))
    half = -(-max(nbytes, 1) // 2)
    return min(slot_bytes, -(-half // _PAGE) * _PAGE), min(slots, 2)


def split_pieces(jobs: list[DeviceJob], piece_bytes: int) -> list[Piece]:
    """Every job cut into pieces of at most `piece_bytes`, in job order."""
    return [
        Piece(job, off, min(piece_bytes, job.nbytes - off))
        for job in jobs
        for off in range(0, job.nbytes, piece_bytes)
    ]


def stream_to_device(
    jobs: list[DeviceJob],
    dest: Any,
    copier: DeviceCopier,
    staging: RingStaging,
    *,
    threads: int = 4,
    read: ReadFn | None = None,
    cancel: threading.Event | None = None,
) -> int:
    """Fill `dest` (a device buffer from `copier.allocate`) from `jobs`; returns pieces copied.

    Raises the first failure (IntegrityError for a short read, DeviceCopyError, RestoreCancelled
    when `cancel` is set) after every started copy has finished."""
    reader = read or pread_piece
    pieces = split_pieces(jobs, staging.piece_bytes)
    todo: queue.SimpleQueue[Piece] = queue.SimpleQueue()
    for piece in pieces:
        todo.put(piece)
    stop = threading.Event()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def stopped() -> bool:
        return stop.is_set() or (cancel is not None and cancel.is_set())

    def fail(exc: BaseException) -> None:
        with lock:
            errors.append(exc)
        stop.set()

    def work() -> None:
        try:
            while not stopped():
                try:
                    piece = todo.get_nowait()
                except queue.Empty:
                    return
                stage = staging.take(piece, stopped)
                if stage is None:
                    return
                copy = None
                try:
                    view = stage.buffer.view[stage.offset : stage.offset + piece.nbytes]
                    reader(piece.job, piece.offset, view)
                    copy = copier.copy(
                        stage.buffer, stage.offset, piece.nbytes, dest, piece.device_offset
                    )
                finally:
                    staging.give_back(stage, copy)
        except BaseException as exc:  # re-raised below, in the caller's thread
            fail(exc)

    workers = [
        threading.Thread(target=work, name=f"thaw-h2d-{i}", daemon=True)
        for i in range(max(1, min(threads, len(pieces))))
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    late = staging.drain()
    if late is not None:
        errors.append(late)
    if not errors:
        copier.synchronize()
    if errors:
        raise errors[0]
    if cancel is not None and cancel.is_set():
        raise RestoreCancelled(f"restore to {copier.device} cancelled")
    return len(pieces)


def pread_piece(job: DeviceJob, offset: int, view: memoryview) -> None:
    """`preadv` one piece of a job's file (its `fd`, else its path opened now) into `view`;
    IntegrityError if the file is short."""
    fd = job.fd if job.fd is not None else os.open(job.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        done = 0
        while done < len(view):
            got = os.preadv(fd, [view[done:]], job.file_offset + offset + done)
            if got == 0:
                raise IntegrityError(f"chunk {job.tag} is truncated", digest=job.tag)
            done += got
    finally:
        if job.fd is None:
            os.close(fd)


def read_from_memory(views: Mapping[str, memoryview], files: ReadFn) -> ReadFn:
    """A reader that copies the pieces of a job whose `tag` has bytes in `views` (already
    checked in host memory: fetched or hashed there) out of them, and reads the others with
    `files`; a job's `file_offset` is then its offset in its view."""

    def read(job: DeviceJob, offset: int, view: memoryview) -> None:
        held = views.get(job.tag)
        if held is None:
            files(job, offset, view)
            return
        start = job.file_offset + offset
        if start + len(view) > len(held):
            raise SnapshotError(f"piece of {job.tag} past its {len(held)} bytes in host memory")
        np.copyto(
            np.frombuffer(view, dtype=np.uint8),
            np.frombuffer(held[start : start + len(view)], dtype=np.uint8),
        )

    return read
