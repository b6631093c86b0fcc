"""Read file ranges into caller-owned memory with several threads (`os.preadv`, no staging).

With `direct=True`, a piece that is mostly not in the page cache is read with O_DIRECT (the
device writes straight into the destination; no page-cache copy, almost no CPU) where the
destination memory and the file offset are aligned, e.g. chunks into an arena; warm pieces,
unaligned ones and filesystems without O_DIRECT keep ordinary reads (see `direct_io`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from snapshotter.direct_io import ALIGN, aligned_prefix, cached_fraction, open_direct
from snapshotter.errors import IntegrityError, SnapshotStoreError

PIECE_BYTES = 16 << 20
DIRECT_BELOW_CACHED = 0.5
"""A piece with less than this fraction in the page cache is read with O_DIRECT."""


@dataclass(frozen=True)
class ReadJob:
    """Fill `dest` with the bytes of `path` starting at `file_offset`; `tag` names it in errors."""

    path: Path
    file_offset: int
    dest: memoryview
    tag: str


OnPiece = Callable[[ReadJob, int, int], None]


def read_into(
    jobs: list[ReadJob],
    *,
    threads: int,
    piece_bytes: int = PIECE_BYTES,
    on_piece: OnPiece | None = None,
    direct: bool = False,
    read_stats: dict[Path, os.stat_result] | None = None,
) -> int:
    """Run every job split into `piece_bytes` pieces on `threads` threads; return bytes read.

    `on_piece(job, offset, nbytes)` is called (in a worker thread) after each piece landed.
    A file shorter than its job raises `IntegrityError` naming the job's tag. `direct`: read
    cold, aligned pieces with O_DIRECT (see the module docstring). `read_stats`, when given,
    receives each path's `fstat` taken after all its reads: the file the bytes really came
    from, even if the path was replaced meanwhile (what a verified marker is checked against).
    """
    fds: dict[Path, _Fds] = {}
    try:
        for job in jobs:
            if job.path not in fds:
                plain = _open(job)
                fds[job.path] = _Fds(plain, open_direct(job.path, os.O_RDONLY) if direct else None)
        pieces = [
            (job, off, min(piece_bytes, len(job.dest) - off))
            for job in jobs
            for off in range(0, len(job.dest), piece_bytes)
        ]
        with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="thaw-read") as ex:
            futures = [ex.submit(_read_piece, fds[j.path], j, o, n, on_piece) for j, o, n in pieces]
            done = sum(f.result() for f in futures)
        if read_stats is not None:
            read_stats.update({path: os.fstat(pair.plain) for path, pair in fds.items()})
        return done
    finally:
        for pair in fds.values():
            os.close(pair.plain)
            if pair.direct is not None:
                os.close(pair.direct)


@dataclass(frozen=True)
class _Fds:
    plain: int
    direct: int | None


def _open(job: ReadJob) -> int:
    """A descriptor of the job's file, which must be a regular file: a FIFO in its place
    would block the open (and then every read) for as long as no writer comes, a device such
    as /dev/zero is not a chunk. O_NONBLOCK changes nothing for a regular file."""
    try:
        fd = os.open(job.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise IntegrityError(f"chunk {job.tag} is missing", digest=job.tag) from exc
    except OSError as exc:
        raise SnapshotStoreError(f"cannot open chunk {job.tag}: {exc.strerror}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise IntegrityError(f"chunk {job.tag} is not a regular file", digest=job.tag)
    return fd


def _read_piece(fds: _Fds, job: ReadJob, offset: int, nbytes: int, on_piece: OnPiece | None) -> int:
    view = job.dest[offset : offset + nbytes]
    at = job.file_offset + offset
    done = 0
    # Unaligned memory or offset: no O_DIRECT at all (and no cachestat call to decide it).
    aligned = aligned_prefix(view, at) if fds.direct is not None else 0
    if fds.direct is not None and aligned and _cold(fds.plain, at, nbytes):
        done = _pread(fds.direct, job, view, at, aligned, direct=True)
    _pread(fds.plain, job, view, at, nbytes, done=done)
    if on_piece is not None:
        on_piece(job, offset, nbytes)
    return nbytes


def _cold(fd: int, offset: int, nbytes: int) -> bool:
    fraction = cached_fraction(fd, offset, nbytes)
    return fraction is not None and fraction < DIRECT_BELOW_CACHED


def _pread(
    fd: int,
    job: ReadJob,
    view: memoryview,
    at: int,
    until: int,
    *,
    done: int = 0,
    direct: bool = False,
) -> int:
    """Read `view[done:until]` from file offset `at + done`; return how far it got. A direct
    read stops early (the caller finishes with ordinary reads) at an unaligned short read."""
    while done < until:
        try:
            got = os.preadv(fd, [view[done:until]], at + done)
        except OSError as exc:
            if direct:  # e.g. EINVAL from a filesystem with stricter alignment
                return done
            raise SnapshotStoreError(f"reading chunk {job.tag} failed: {exc.strerror}") from exc
        if got == 0:
            raise IntegrityError(f"chunk {job.tag} is truncated", digest=job.tag)
        done += got
        if direct and got % ALIGN:
            return done
    return done
