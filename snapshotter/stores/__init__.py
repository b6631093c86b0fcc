"""Image store adapters and the one function that turns a store URI into one.

    base            the ImageStore Protocol the restore path and the CLI use
    dir_store       a directory store: atomic writes, verified-chunk markers
    s3_store        S3 (boto3): parallel ranged GETs into the caller's buffer
    s3_body         an S3 GET body read straight into caller memory

Exports `open_store` (defined here), `ImageStore`, `DirStore`, `OnBytes` and `StoredChunk`.
"""

from __future__ import annotations

from pathlib import Path

from snapshotter.errors import ImageRefError
from snapshotter.stores.base import ImageStore, OnBytes, StoredChunk
from snapshotter.stores.dir_store import DirStore

__all__ = ["DirStore", "ImageStore", "OnBytes", "StoredChunk", "open_store"]


def open_store(uri: str, *, read_threads: int = 4) -> ImageStore:
    """`s3://bucket[/prefix]` (boto3's standard configuration), `file:///dir` or a directory."""
    if uri.startswith("s3://"):
        from snapshotter.stores.s3_store import S3Config, S3Store

        # Network reads wait on latency, not CPU: twice the disk readers (8 by default).
        return S3Store(uri, S3Config(max_parallel=2 * read_threads))
    if "://" in uri and not uri.startswith("file://"):
        raise ImageRefError(f"store URI {uri!r}: use s3://bucket/prefix or a directory")
    path = uri.removeprefix("file://")
    if not path:
        raise ImageRefError("store URI is empty")
    return DirStore(Path(path), read_threads=read_threads)
