"""A persistent memo of model-file hashes, so a fresh process need not re-hash unchanged files.

One small JSON file (in the node cache directory) maps a file's absolute path to the sha256 of
its content and the `stat` fingerprint it had when hashed: size, mtime_ns, ctime_ns, inode and
device. An entry is used only while the file's fingerprint is still exactly the same; a file
written to, truncated, replaced or renamed over changes at least one of them. Entries are
stored only for files whose mtime and ctime were already older than `_RACY_S` when the hash
began, so a write landing within the file system's timestamp granularity after the hash can
never leave a wrong entry behind ("racy git"). The file is replaced atomically (write a
temporary file, fsync, rename); concurrent writers can lose each other's new entries, never
corrupt them, and an unreadable index is treated as empty.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from pathlib import Path

__all__ = ["INDEX_NAME", "DigestIndex", "Fingerprint", "fingerprint", "index_for_store"]

logger = logging.getLogger(__name__)

INDEX_NAME = "source-digests.json"
_FORMAT = "thaw-source-digests-v1"
_RACY_S = 2.0
_MAX_ENTRIES = 4096

Fingerprint = tuple[int, int, int, int, int]
"""(size, mtime_ns, ctime_ns, inode, device) of one file."""


def fingerprint(st: os.stat_result) -> Fingerprint:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def settled(fp: Fingerprint, hashed_at_ns: int) -> bool:
    """True when the file's timestamps were already `_RACY_S` old when hashing started."""
    limit = hashed_at_ns - int(_RACY_S * 1e9)
    return fp[1] < limit and fp[2] < limit


class DigestIndex:
    """The persistent memo at `path` (loaded once, saved by `save()` when something changed)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[Fingerprint, str]] | None = None
        self._new: dict[str, tuple[Fingerprint, str]] = {}

    def get(self, path: str, fp: Fingerprint) -> str | None:
        """The recorded digest of `path` if its fingerprint is unchanged, else None."""
        with self._lock:
            if self._entries is None:
                self._entries = self._read()
            entry = self._entries.get(path)
        return entry[1] if entry is not None and entry[0] == fp else None

    def put(self, path: str, fp: Fingerprint, digest: str, hashed_at_ns: int) -> None:
        """Record `digest` for `path` (only when its timestamps were settled before hashing)."""
        if not settled(fp, hashed_at_ns):
            return
        with self._lock:
            if self._entries is None:
                self._entries = self._read()
            self._entries[path] = (fp, digest)
            self._new[path] = (fp, digest)

    def save(self) -> None:
        """Merge new entries into the file on disk, atomically; errors are logged, not raised."""
        with self._lock:
            if not self._new:
                return
            new, self._new = self._new, {}
        merged = self._read()
        merged.update(new)
        if len(merged) > _MAX_ENTRIES:  # drop the oldest-written entries first
            merged = dict(list(merged.items())[-_MAX_ENTRIES:])
        doc = {
            "format": _FORMAT,
            "files": {p: [*fp, digest] for p, (fp, digest) in merged.items()},
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{INDEX_NAME}.", dir=self.path.parent)
            try:
                os.fchmod(fd, 0o644)  # readable by every runtime process that shares the cache
                with os.fdopen(fd, "w") as f:
                    json.dump(doc, f, separators=(",", ":"))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            logger.warning("cannot write the source digest index %s: %s", self.path, exc)

    def _read(self) -> dict[str, tuple[Fingerprint, str]]:
        try:
            doc = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            logger.warning("ignoring unreadable source digest index %s: %s", self.path, exc)
            return {}
        out: dict[str, tuple[Fingerprint, str]] = {}
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            return out
        files = doc.get("files")
        for path, row in files.items() if isinstance(files, dict) else ():
            if (
                isinstance(row, list)
                and len(row) == 6
                and all(isinstance(v, int) and not isinstance(v, bool) for v in row[:5])
                and isinstance(row[5], str)
                and len(row[5]) == 64
            ):
                out[path] = ((row[0], row[1], row[2], row[3], row[4]), row[5])
        return out


def index_for_store(store: object) -> DigestIndex | None:
    """The index kept next to a directory store (a node cache is one), else None."""
    from snapshotter.stores.dir_store import DirStore

    return DigestIndex(store.root / INDEX_NAME) if isinstance(store, DirStore) else None
