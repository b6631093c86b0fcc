"""Images on moto S3: a store over a bucket prefix, and a model built and pushed there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from snapshot_s3_fakes import BUCKET

from snapshotter import build_image
from snapshotter.image_ref import ImageRef
from snapshotter.stores.dir_store import DirStore
from snapshotter.stores.s3_store import S3Config, S3Store
from snapshotter.transfer import copy_image
from tests.fakes.loop import HUNG_AFTER_S

CHUNK_BYTES = 256 << 10  # several chunks per image
RANGE_BYTES = 64 << 10  # several ranged GETs per chunk


def s3_store(prefix: str, *, read_timeout: float = HUNG_AFTER_S, **overrides: Any) -> S3Store:
    """A store of the test bucket under `prefix`. Its reads wait HUNG_AFTER_S: the moto server
    is a process a loaded machine can stall for seconds; stall tests pass their own short one."""
    config = S3Config(
        max_parallel=4,
        range_bytes=RANGE_BYTES,
        connect_timeout_s=2,
        read_timeout_s=read_timeout,
        **overrides,
    )
    return S3Store(f"s3://{BUCKET}/{prefix}", config)


def publish(repo: Path, tmp_path: Path, prefix: str, model: str) -> S3Store:
    """Build `model` into a directory store, push it to S3 under `prefix`."""
    local = DirStore(tmp_path / "built")
    build_image(repo / model / "1", local, max_chunk_bytes=CHUNK_BYTES)
    remote = s3_store(prefix)
    copy_image(local, remote, ImageRef(model, "1", "cpu"))
    return remote
