"""The content digest of a model version directory: keys an image to the files it came from."""

from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from snapshotter.errors import BuildError

_READ_BYTES = 8 << 20
_memo: dict[tuple[str, int, int, int], str] = {}
_memo_lock = threading.Lock()


def source_digest(version_dir: Path) -> str:
    """sha256 over every regular file under `version_dir`: relative path, size and content.

    File hashes are memoized per process by (path, size, mtime, inode), so asking again for
    unchanged files costs one `stat` each.
    """
    root = Path(version_dir)
    if not root.is_dir():
        raise BuildError(f"{root} is not a directory")
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="thaw-digest") as pool:
        digests = list(pool.map(_file_digest, files))
    outer = hashlib.sha256(b"thaw-source-v1\0")
    for path, digest in zip(files, digests, strict=True):
        rel = path.relative_to(root).as_posix()
        outer.update(f"{rel}\0{path.stat().st_size}\0{digest}\n".encode())
    return outer.hexdigest()


def _file_digest(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    with _memo_lock:
        if key in _memo:
            return _memo[key]
    h = hashlib.sha256()
    try:
        with path.open("rb", buffering=0) as f:
            buf = bytearray(_READ_BYTES)
            view = memoryview(buf)
            while n := f.readinto(buf):
                h.update(view[:n])
    except OSError as exc:
        raise BuildError(f"cannot read {path}: {os.strerror(exc.errno or 0)}") from exc
    digest = h.hexdigest()
    with _memo_lock:
        _memo[key] = digest
    return digest
