"""Restores read the node cache through the page cache (the next wake reads memory)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from snapshotter import build_image
from snapshotter.stores.dir_store import DirStore


def test_a_cold_cache_restore_leaves_the_chunks_in_the_page_cache(tmp_path: Path) -> None:
    """The next wake of the same model must read memory, not the device: restores read the
    node cache through the page cache unless `direct_reads` asks for O_DIRECT."""
    from snapshotter import ImageLoader
    from snapshotter.direct_io import cached_fraction

    raw = np.random.default_rng(3).standard_normal(1 << 20).astype(np.float32).tobytes()
    head = json.dumps({"w": {"dtype": "F32", "shape": [1 << 20], "data_offsets": [0, len(raw)]}})
    version = tmp_path / "repo" / "big" / "1"
    version.mkdir(parents=True)
    (version / "model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head.encode() + raw)
    store = DirStore(tmp_path / "cache")
    build_image(version, store)
    chunks = [store.chunk_file(d) for d in store.list_chunks()]

    def resident() -> float | None:
        fractions = []
        for path in chunks:
            fd = os.open(path, os.O_RDONLY)
            try:
                fractions.append(cached_fraction(fd, 0, path.stat().st_size))
            finally:
                os.close(fd)
        return None if None in fractions else min(f for f in fractions if f is not None)

    def evict() -> None:
        for path in chunks:
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)

    evict()
    if resident() is None or resident() > 0.5:
        pytest.skip("no cachestat here, or the page cache cannot be dropped on this filesystem")
    loader = ImageLoader(None, tmp_path / "cache", "cpu")
    ref = loader.find("big", "1", None)
    assert ref is not None
    loader.restore(ref)
    assert (resident() or 0.0) > 0.9
    evict()
    ImageLoader(None, tmp_path / "cache", "cpu", direct_reads=True).restore(ref)
    assert (resident() or 0.0) < 0.5  # O_DIRECT, on request, bypasses it
