"""A directory store seen as a remote one (not a DirStore): restores copy from it into the node
cache, as from S3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from snapshotter.stores.dir_store import DirStore


class RemoteStore:
    """Every store call goes to a DirStore over `root`; only its type differs, so the loader
    treats it as remote (fetches into the cache instead of reading in place)."""

    def __init__(self, root: Path) -> None:
        self._dir = DirStore(root)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dir, name)
