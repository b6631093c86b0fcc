"""A checkpoint's small files (tokenizer, configs, shard index) as image blobs, restored to disk.

An LLM checkpoint is more than its weights: `tokenizer.json`, `tokenizer_config.json`,
`special_tokens_map.json`, `config.json`, `model.safetensors.index.json` sit beside the shards,
and the model's code reads them from a directory. The builder stores each as a content-addressed
blob and the manifest names it (`Manifest.files`); a restore writes the set into
`<root>/<set digest>/` so the model finds them on disk.

File names come from an untrusted manifest, so each must be one plain path component
(`check_file_name`); the set is written into a temporary sibling and renamed into place, so a
reader never sees half a set and nothing is written outside `root`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snapshotter.published_dir import publish_dir

MAX_FILES = 4096
"""Files (and, separately, shards) one manifest may name."""
MAX_FILE_BYTES = 256 << 20
"""Largest model file stored beside the weights (a big `tokenizer.json` is ~30 MB)."""
MAX_FILE_NAME = 255
_FORBIDDEN = ("/", "\\", "\x00")


def check_file_name(name: Any) -> str:
    """`name` if it is one plain file name (no directory part, not `.`/`..`, not hidden, at
    most 255 characters); else ValueError saying why."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_FILE_NAME:
        raise ValueError(f"{str(name)[:80]!r} is not a file name of 1..{MAX_FILE_NAME} characters")
    if any(c in name for c in _FORBIDDEN) or name.startswith(".") or name.strip() != name:
        raise ValueError(f"{name[:80]!r} is not one plain file name inside the model directory")
    return name


def set_digest(files: Mapping[str, Any]) -> str:
    """The directory name of a file set: sha256 over its sorted `name\\0digest` lines (each value
    has a `digest`), so the same files always land in the same directory."""
    outer = hashlib.sha256(b"thaw-model-files-v1\0")
    for name in sorted(files):
        outer.update(f"{name}\0{files[name].digest}\n".encode())
    return outer.hexdigest()


def write_files(files: Mapping[str, bytes | memoryview], root: Path, name: str) -> Path:
    """Write `files` (file name -> verified bytes) into `root/<name>` and return that directory;
    an existing one (written before, by any process) is returned as it is."""
    for file_name in files:
        check_file_name(file_name)

    def fill(tmp: Path) -> None:
        for file_name, data in files.items():
            # O_EXCL | O_NOFOLLOW: a fresh regular file inside our own temporary directory.
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            fd = os.open(tmp / file_name, flags, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)

    return publish_dir(root, name, fill, what="model files")
