"""A directory image store: atomic writes (temp + rename) and verified-chunk markers."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import tempfile
from pathlib import Path

from snapshotter.content_address import check_digest, chunk_path
from snapshotter.errors import (
    ImageNotFound,
    ImageRefError,
    IntegrityError,
    ManifestError,
    SnapshotStoreError,
)
from snapshotter.image_ref import ImageRef
from snapshotter.manifest import MAX_MANIFEST_BYTES
from snapshotter.parallel_read import ReadJob, read_into
from snapshotter.stores.base import OnBytes, StoredChunk

logger = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"


class DirStore:
    """Images under `<root>/images/<model>/<version>/<target>/manifest.json`, chunks under
    `<root>/chunks/<aa>/<digest>`.

    A chunk whose bytes were checked against their digest gets a marker `<digest>.ok` holding
    the file's size, mtime and inode; a later reader trusts the chunk only while they match, so
    a truncated, rewritten or replaced file is never served as verified.
    """

    def __init__(
        self, root: Path, *, read_threads: int = 4, fsync: bool = True, direct_reads: bool = False
    ) -> None:
        self.root = Path(root)
        self.uri = str(self.root)
        self.read_threads = read_threads
        self.fsync = fsync
        # O_DIRECT for cold chunks only on request: ordinary reads leave them in the page cache
        # for the next restore (see `ImageLoader`).
        self.direct_reads = direct_reads

    # -- manifests -------------------------------------------------------------------------
    def read_manifest(self, ref: ImageRef) -> bytes:
        """The manifest's bytes. Only a regular file is read, and never more than
        `MAX_MANIFEST_BYTES` + 1 of it (the parser refuses that size): a FIFO, a device (a
        symlink to /dev/zero) or a huge file is refused at once instead of hanging the load or
        filling memory."""
        path = self.root / ref.key / MANIFEST_NAME
        try:
            # O_NONBLOCK: opening a FIFO for reading would wait for a writer.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError as exc:
            raise ImageNotFound(f"no image {ref} in {self.uri}") from exc
        except OSError as exc:
            raise SnapshotStoreError(f"cannot read {path}: {exc.strerror}") from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ManifestError(f"manifest of image {ref} is not a regular file")
            if st.st_size > MAX_MANIFEST_BYTES:
                raise ManifestError(
                    f"manifest of image {ref} is {st.st_size} bytes, over {MAX_MANIFEST_BYTES}"
                )
            with os.fdopen(os.dup(fd), "rb") as file:
                return file.read(MAX_MANIFEST_BYTES + 1)
        except OSError as exc:
            raise SnapshotStoreError(f"cannot read {path}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    def write_manifest(self, ref: ImageRef, data: bytes) -> None:
        self._atomic_write(self.root / ref.key / MANIFEST_NAME, [memoryview(data)])

    def delete_manifest(self, ref: ImageRef) -> None:
        (self.root / ref.key / MANIFEST_NAME).unlink(missing_ok=True)

    def list_images(self) -> list[ImageRef]:
        refs = []
        for path in sorted(self.root.glob(f"images/*/*/*/{MANIFEST_NAME}")):
            model, version, target = path.parts[-4:-1]
            try:
                refs.append(ImageRef(model, version, target))
            except ImageRefError:
                logger.warning("ignoring a manifest at an invalid path %s", path)
        return refs

    # -- chunks ----------------------------------------------------------------------------
    def chunk_file(self, digest: str) -> Path:
        return chunk_path(self.root, digest)

    def chunk_size(self, digest: str) -> int | None:
        try:
            return self.chunk_file(digest).stat().st_size
        except FileNotFoundError:
            return None

    def read_chunk_into(self, digest: str, dest: memoryview, *, on_bytes: OnBytes | None) -> None:
        size = self.chunk_size(digest)
        if size is not None and size != len(dest):
            msg = f"chunk {digest} is {size} bytes, expected {len(dest)}"
            raise IntegrityError(msg, digest=digest)
        job = ReadJob(self.chunk_file(digest), 0, dest, digest)
        callback = None if on_bytes is None else (lambda _j, off, n: on_bytes(off, n))
        read_into([job], threads=self.read_threads, on_piece=callback, direct=self.direct_reads)

    def write_chunk(self, digest: str, data: memoryview) -> None:
        path = self.chunk_file(digest)
        self._atomic_write(path, [data])
        self.mark_verified(digest)

    def list_chunks(self) -> dict[str, int]:
        found = {}
        for path in self.root.glob("chunks/*/*"):
            try:
                digest = check_digest(path.name)
            except ManifestError:
                continue
            try:
                found[digest] = path.stat().st_size
            except FileNotFoundError:  # deleted since the listing
                continue
        return found

    def chunk_stats(self) -> dict[str, StoredChunk]:
        found = {}
        for digest in self.list_chunks():
            stat = self.chunk_stat(digest)
            if stat is not None:  # not deleted since the listing
                found[digest] = stat
        return found

    def chunk_stat(self, digest: str) -> StoredChunk | None:
        """Size, and the later of the file's and its verified marker's mtime: `touch_chunk`
        and every restore from a cache refresh the marker, never the chunk file itself (the
        marker records the file's mtime, so touching the file would un-verify it)."""
        try:
            st = self.chunk_file(digest).stat()
        except FileNotFoundError:
            return None
        try:
            marked = self._marker(digest).stat().st_mtime
        except OSError:
            marked = 0.0
        return StoredChunk(st.st_size, max(st.st_mtime, marked))

    def touch_chunk(self, digest: str) -> bool:
        marker, path = self._marker(digest), self.chunk_file(digest)
        try:
            os.utime(marker if marker.exists() else path)
            return path.exists()  # a concurrent delete removes the file, then the marker
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise SnapshotStoreError(f"cannot touch chunk {digest}: {exc.strerror}") from exc

    def delete_chunk(self, digest: str) -> None:
        path = self.chunk_file(digest)
        path.unlink(missing_ok=True)
        path.with_name(digest + ".ok").unlink(missing_ok=True)

    # -- verified markers ------------------------------------------------------------------
    def mark_verified(self, digest: str, read: os.stat_result | None = None) -> None:
        """Record that the chunk file as it is now matched its digest; `read`: the `fstat`
        of the file whose bytes were hashed, recorded instead of whatever the path holds now
        (a file put there since then must not inherit the marker)."""
        st = read if read is not None else self.chunk_file(digest).stat()
        marker = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}
        self._atomic_write(self._marker(digest), [memoryview(json.dumps(marker).encode())])

    def is_verified(self, digest: str, size: int, read: os.stat_result | None = None) -> bool:
        """True when the chunk exists with `size` bytes and is unchanged since verification.
        `read`: the `fstat` of the file a reader's bytes came from, checked instead of the
        path's (which may have been replaced between a check and the read)."""
        try:
            st = read if read is not None else self.chunk_file(digest).stat()
            marker = json.loads(self._marker(digest).read_bytes())
        except (OSError, ValueError):
            return False
        seen = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}
        return st.st_size == size and marker == seen

    def touch(self, digest: str) -> None:
        """Mark a chunk as just used (LRU order lives in the marker's mtime)."""
        with contextlib.suppress(OSError):
            os.utime(self._marker(digest))

    def _marker(self, digest: str) -> Path:
        return self.chunk_file(digest).with_name(digest + ".ok")

    # -- atomic writes ---------------------------------------------------------------------
    def temp_file(self, final: Path) -> tuple[int, Path]:
        """Open a temp file next to `final` (same filesystem, so rename is atomic)."""
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f".{final.name[:16]}.", dir=final.parent)
        except OSError as exc:
            raise SnapshotStoreError(f"cannot write under {self.root}: {exc.strerror}") from exc
        return fd, Path(name)

    def commit(self, fd: int, temp: Path, final: Path) -> None:
        """fsync (if configured), close and rename `temp` over `final`."""
        try:
            if self.fsync:
                os.fsync(fd)
            os.close(fd)
            os.replace(temp, final)
        except OSError as exc:
            temp.unlink(missing_ok=True)
            raise SnapshotStoreError(f"cannot write {final}: {exc.strerror}") from exc

    def _atomic_write(self, final: Path, parts: list[memoryview]) -> None:
        fd, temp = self.temp_file(final)
        try:
            for part in parts:
                view = part.cast("B") if part.format != "B" else part
                written = 0
                while written < len(view):
                    written += os.write(fd, view[written:])
        except OSError as exc:
            os.close(fd)
            temp.unlink(missing_ok=True)
            raise SnapshotStoreError(f"cannot write {final}: {exc.strerror}") from exc
        self.commit(fd, temp, final)
