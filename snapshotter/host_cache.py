"""The host-memory tier: restored images kept in a tmpfs directory that every process shares.

An entry is one file, `<manifest sha256>.img`, holding an image's arena exactly as a restore
lays it out. A process that finds its image there maps the file copy-on-write instead of
reading the chunks (1 GiB: ~0.03 s to fill the page tables, against ~0.15-0.3 s to read into
fresh memory), and every process that maps it shares the same pages. Entries are published
after a restore from the node cache, by copying the cache's verified chunk files (never the
arena a model may already use; each checked against its marker by the file copied, not the
path) in a low-priority background thread: the file is written
under a temporary name and linked into place only when complete, so a reader never sees half
an image. The directory holds at most `max_bytes`: before an entry is added, the least
recently used ones are removed (`plan_expiry`, pure). Removing the file of an image a live
process maps frees its memory only when that process unmaps it. Evictions are counted in the
directory (thawserver.cache_counters) and in this object.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from snapshotter.arena import Arena
from snapshotter.errors import IntegrityError, SnapshotError
from thawserver.cache_counters import record_evictions

logger = logging.getLogger(__name__)

Clock = Callable[[], float]
_SUFFIX = ".img"
_TEMP_PREFIX = ".tmp-"
_LOCK = ".lock"
_COPY_STEP = 8 << 20
_PUBLISH_DELAY_S = 2.0  # after the restore: the replica's first inferences go first


@dataclass(frozen=True)
class HostEntry:
    """One kept image as the expiry policy sees it: `last_used` in clock seconds."""

    name: str
    nbytes: int
    last_used: float


@dataclass(frozen=True)
class Piece:
    """`size` bytes of file `path` (a verified cache chunk) that go at `offset` of the arena.

    `trusted(fstat)`, when given, says whether the file copied may be kept: it is called with
    the `fstat` of the file opened, after the copy (the chunk's verified marker checked against
    the very file read, so one renamed over the path or rewritten meanwhile is never kept)."""

    path: Path
    offset: int
    size: int
    trusted: Callable[[os.stat_result], bool] | None = None


def plan_expiry(
    entries: Sequence[HostEntry], *, now: float, retention_s: float, max_bytes: int
) -> list[HostEntry]:
    """Entries to drop: unused for longer than `retention_s`, then the least recently used
    until the rest fits `max_bytes`."""
    expired = [e for e in entries if now - e.last_used > retention_s]
    alive = sorted((e for e in entries if e not in expired), key=lambda e: e.last_used)
    total = sum(e.nbytes for e in alive)
    while alive and total > max_bytes:
        victim = alive.pop(0)
        expired.append(victim)
        total -= victim.nbytes
    return expired


class HostCache:
    """The tier at `root` (None or `max_bytes` 0: off), shared with other processes."""

    def __init__(
        self,
        root: Path | None,
        *,
        max_bytes: int,
        retention_s: float = float("inf"),
        clock: Clock = time.time,
        publish_delay_s: float = _PUBLISH_DELAY_S,
    ) -> None:
        self.root = Path(root) if root is not None and max_bytes > 0 else None
        self.max_bytes = max_bytes
        self.retention_s = retention_s
        self._clock = clock
        self._publish_delay_s = publish_delay_s
        self.hits = self.misses = self.evictions = self.evicted_bytes = self.published = 0
        self._publishing: set[str] = set()
        self._lock = threading.Lock()  # restores run in worker threads
        self._published_all = threading.Condition(self._lock)  # _publishing became empty
        if self.root is not None:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    @property
    def enabled(self) -> bool:
        return self.root is not None

    def path_of(self, manifest_digest: str) -> Path:
        """The entry file of this manifest (whether or not it exists)."""
        if self.root is None:
            raise SnapshotError("the host tier is off")
        return self.root / f"{manifest_digest}{_SUFFIX}"

    def get(self, manifest_digest: str, nbytes: int) -> Arena | None:
        """The kept arena of this exact manifest, mapped copy-on-write, or None."""
        fd = self._open(manifest_digest, nbytes)
        if fd is None:
            return None
        try:
            arena = Arena.mapped(fd, nbytes)
        except SnapshotError as exc:
            logger.warning("host tier entry %s unusable: %s", manifest_digest[:12], exc)
            self._count("misses")
            return None
        finally:
            os.close(fd)
        self._used(manifest_digest)
        return arena

    def open_entry(self, manifest_digest: str, nbytes: int) -> int | None:
        """A read-only descriptor of this exact manifest's kept entry (the caller closes it),
        or None. A restore to a GPU reads the entry through it (`pread` from the tmpfs, in
        parallel) instead of mapping it: mapping 16 GiB fills millions of page-table entries
        in one thread before the first byte moves. The descriptor keeps the entry readable
        even if it is evicted meanwhile."""
        fd = self._open(manifest_digest, nbytes)
        if fd is not None:
            self._used(manifest_digest)
        return fd

    def _open(self, manifest_digest: str, nbytes: int) -> int | None:
        """A descriptor of the entry if it exists with exactly `nbytes` (a miss counted if not)."""
        if self.root is None or nbytes == 0:
            return None
        path = self.path_of(manifest_digest)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            self._count("misses")
            return None
        if os.fstat(fd).st_size != nbytes:
            os.close(fd)
            logger.warning("host tier entry %s has the wrong size; ignored", path.name)
            self._count("misses")
            return None
        return fd

    def _used(self, manifest_digest: str) -> None:
        """A hit: counted, and the entry marked recently used (the last to be evicted)."""
        with contextlib.suppress(OSError):
            os.utime(self.path_of(manifest_digest))
        self._count("hits")

    def publish_later(self, manifest_digest: str, nbytes: int, pieces: Sequence[Piece]) -> None:
        """Copy `pieces` into a new entry in a background thread (no-op when the entry
        exists, is being published by this process, or cannot fit)."""
        if self.root is None or nbytes == 0 or nbytes > self.max_bytes:
            return
        if self.path_of(manifest_digest).exists():
            return
        with self._lock:
            if manifest_digest in self._publishing:
                return
            self._publishing.add(manifest_digest)
        thread = threading.Thread(
            target=self._publish_in_background,
            args=(manifest_digest, nbytes, tuple(pieces)),
            name="thaw-host-tier",
            daemon=True,
        )
        thread.start()

    def _publish_in_background(self, digest: str, nbytes: int, pieces: tuple[Piece, ...]) -> None:
        with contextlib.suppress(OSError):  # this thread only: it yields the CPUs to serving
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        time.sleep(self._publish_delay_s)
        try:
            self.publish(digest, nbytes, pieces)
        except (OSError, IntegrityError) as exc:  # tmpfs full, a chunk replaced: only a cache
            logger.warning("host tier: could not keep image %s: %s", digest[:12], exc)
        finally:
            with self._lock:
                self._publishing.discard(digest)
                if not self._publishing:
                    self._published_all.notify_all()

    def wait_published(self, timeout_s: float) -> bool:
        """Wait until no background publish of this process is under way (what a benchmark or a
        test does before it times a wake, or removes the tier); False on timeout."""
        with self._lock:
            return self._published_all.wait_for(lambda: not self._publishing, timeout_s)

    def publish(self, digest: str, nbytes: int, pieces: Sequence[Piece]) -> bool:
        """Write the entry now (blocking); False when it already existed."""
        assert self.root is not None  # checked by publish_later
        final = self.path_of(digest)
        with self._locked():
            self._make_room(nbytes)
        temp = self.root / f"{_TEMP_PREFIX}{os.getpid()}-{threading.get_native_id()}-{digest}"
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, nbytes)
            for piece in pieces:
                _copy(piece, fd)
            try:
                os.link(temp, final)  # all or nothing: readers see a whole image or none
            except FileExistsError:
                return False
        finally:
            os.close(fd)
            temp.unlink(missing_ok=True)
        self._count("published")
        logger.info("host tier keeps image %s (%d bytes)", digest[:12], nbytes)
        return True

    def _make_room(self, incoming: int) -> None:
        assert self.root is not None
        entries = self.entries()
        drop = plan_expiry(
            entries,
            now=self._clock(),
            retention_s=self.retention_s,
            max_bytes=max(0, self.max_bytes - incoming),
        )
        freed = 0
        for entry in drop:
            with contextlib.suppress(FileNotFoundError):
                (self.root / entry.name).unlink()
                freed += entry.nbytes
                logger.info("host tier evicted %s (%d bytes)", entry.name[:12], entry.nbytes)
        if drop:
            with self._lock:
                self.evictions += len(drop)
                self.evicted_bytes += freed
            record_evictions(self.root, len(drop), freed)
        self._sweep_temps()

    def entries(self) -> list[HostEntry]:
        """The entries now, with their sizes and last use."""
        if self.root is None:
            return []
        out = []
        for path in self.root.glob(f"*{_SUFFIX}"):
            with contextlib.suppress(FileNotFoundError):
                stat = path.stat()
                out.append(HostEntry(path.name, stat.st_size, stat.st_mtime))
        return out

    def bytes_used(self) -> int:
        return sum(e.nbytes for e in self.entries())

    def _sweep_temps(self) -> None:
        """Remove half-written entries of processes that died while writing them."""
        assert self.root is not None
        for path in self.root.glob(f"{_TEMP_PREFIX}*"):
            pid = path.name[len(_TEMP_PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                path.unlink(missing_ok=True)

    @contextlib.contextmanager
    def _locked(self):  # type: ignore[no-untyped-def]
        """One evictor at a time across processes (flock of `<root>/.lock`)."""
        assert self.root is not None
        fd = os.open(self.root / _LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)


def _copy(piece: Piece, fd: int) -> None:
    """Copy one chunk file into the entry at its offset, in the kernel (no Python buffer):
    `sendfile` (copy_file_range refuses to cross filesystems, and the tier is a tmpfs)."""
    with open(piece.path, "rb") as src:
        os.lseek(fd, piece.offset, os.SEEK_SET)
        done = 0
        while done < piece.size:
            sent = os.sendfile(fd, src.fileno(), done, min(_COPY_STEP, piece.size - done))
            if sent == 0:
                raise OSError(f"{piece.path} ended after {done} of {piece.size} bytes")
            done += sent
        if piece.trusted is not None and not piece.trusted(os.fstat(src.fileno())):
            raise IntegrityError(
                f"{piece.path} is not the verified chunk file (replaced or rewritten)",
                digest=piece.path.name,
            )
