"""The content digest of a model version directory: keys an image to the files it came from."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from snapshotter.digest_index import DigestIndex, Fingerprint, fingerprint
from snapshotter.errors import BuildError

_READ_BYTES = 8 << 20
_memo: dict[tuple[str, Fingerprint], str] = {}
_memo_lock = threading.Lock()


def source_digest(version_dir: Path, *, index: DigestIndex | None = None) -> str:
    """sha256 over every regular file under `version_dir`: relative path, size and content.

    File hashes are memoized per process by (path, size, mtime, ctime, inode, device), so
    asking again for unchanged files costs one `stat` each; with `index` (a persistent memo,
    see `digest_index`) a fresh process skips files hashed before by any process, too.
    """
    root = Path(version_dir)
    if not root.is_dir():
        raise BuildError(f"{root} is not a directory")
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    stats = [p.stat() for p in files]
    if len(files) == 1:  # the common case: no thread pool to start
        digests = [_file_digest(files[0], stats[0], index)]
    else:
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="thaw-digest") as pool:
            digests = list(pool.map(_file_digest, files, stats, [index] * len(files)))
    if index is not None:
        index.save()
    outer = hashlib.sha256(b"thaw-source-v1\0")
    for path, st, digest in zip(files, stats, digests, strict=True):
        rel = path.relative_to(root).as_posix()
        outer.update(f"{rel}\0{st.st_size}\0{digest}\n".encode())
    return outer.hexdigest()


def file_digest(path: Path, *, index: DigestIndex | None = None) -> str:
    """sha256 of one file, from the same memo and index as `source_digest` (free right after
    it); raises BuildError if the file cannot be read or changes while it is hashed."""
    try:
        st = path.stat()
    except OSError as exc:
        raise BuildError(f"cannot read {path}: {exc.strerror}") from exc
    return _file_digest(path, st, index)


def _file_digest(path: Path, st: os.stat_result, index: DigestIndex | None) -> str:
    fp = fingerprint(st)
    key = (str(path.resolve()), fp)
    with _memo_lock:
        if key in _memo:
            return _memo[key]
    if index is not None and (known := index.get(key[0], fp)) is not None:
        digest = known
    else:
        started_ns = time.time_ns()
        digest = _hash_file(path)
        try:
            unchanged = fingerprint(path.stat()) == fp
        except OSError:
            unchanged = False
        if not unchanged:  # written while we read it: the bytes hashed may be torn
            raise BuildError(f"{path} changed while it was being hashed")
        if index is not None:
            index.put(key[0], fp, digest, started_ns)
    with _memo_lock:
        _memo[key] = digest
    return digest


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with path.open("rb", buffering=0) as f:
            buf = bytearray(_READ_BYTES)
            view = memoryview(buf)
            while n := f.readinto(buf):
                h.update(view[:n])
    except OSError as exc:
        raise BuildError(f"cannot read {path}: {os.strerror(exc.errno or 0)}") from exc
    return h.hexdigest()
