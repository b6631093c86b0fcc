"""Read file ranges into caller-owned memory with several threads (`os.preadv`, no staging)."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from snapshotter.errors import IntegrityError, SnapshotStoreError

PIECE_BYTES = 16 << 20


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
) -> int:
    """Run every job split into `piece_bytes` pieces on `threads` threads; return bytes read.

    `on_piece(job, offset, nbytes)` is called (in a worker thread) after each piece landed.
    A file shorter than its job raises `IntegrityError` naming the job's tag.
    """
    fds: dict[Path, int] = {}
    try:
        for job in jobs:
            if job.path not in fds:
                fds[job.path] = _open(job)
        pieces = [
            (job, off, min(piece_bytes, len(job.dest) - off))
            for job in jobs
            for off in range(0, len(job.dest), piece_bytes)
        ]
        with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="thaw-read") as ex:
            futures = [ex.submit(_read_piece, fds[j.path], j, o, n, on_piece) for j, o, n in pieces]
            return sum(f.result() for f in futures)
    finally:
        for fd in fds.values():
            os.close(fd)


def _open(job: ReadJob) -> int:
    try:
        return os.open(job.path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise IntegrityError(f"chunk {job.tag} is missing", digest=job.tag) from exc
    except OSError as exc:
        raise SnapshotStoreError(f"cannot open chunk {job.tag}: {exc.strerror}") from exc


def _read_piece(fd: int, job: ReadJob, offset: int, nbytes: int, on_piece: OnPiece | None) -> int:
    view = job.dest[offset : offset + nbytes]
    done = 0
    while done < nbytes:
        try:
            got = os.preadv(fd, [view[done:]], job.file_offset + offset + done)
        except OSError as exc:
            raise SnapshotStoreError(f"reading chunk {job.tag} failed: {exc.strerror}") from exc
        if got == 0:
            raise IntegrityError(f"chunk {job.tag} is truncated", digest=job.tag)
        done += got
    if on_piece is not None:
        on_piece(job, offset, nbytes)
    return nbytes
