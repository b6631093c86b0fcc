"""The node cache's byte budget: a restore from a remote store evicts what is least recently used
to fit, and counts it (in the loader and in the cache directory, for `thaw up`'s /metrics)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from snapshotter import ImageLoader, build_image
from snapshotter.image_ref import ImageRef
from snapshotter.stores.dir_store import DirStore
from tests.fakes.remote_store import RemoteStore
from tests.fixtures.safetensors_files import write_safetensors
from thawserver.cache_counters import read_counts


def _model(repo: Path, name: str, seed: int) -> Path:
    version = repo / name / "1"
    version.mkdir(parents=True)
    weights = np.random.default_rng(seed).standard_normal((256, 256)).astype(np.float32)
    write_safetensors(
        version / "model.safetensors", {"w": ("F32", weights.shape, weights.tobytes())}
    )
    return version


def test_a_fetch_over_the_budget_evicts_the_least_recently_used_and_counts_it(
    tmp_path: Path,
) -> None:
    store = RemoteStore(tmp_path / "store")
    for i, name in enumerate(("a", "b")):
        build_image(_model(tmp_path / "repo", name, i), store._dir)
    cache = tmp_path / "cache"
    loader = ImageLoader(None, cache, "cpu", store=store, max_cache_bytes=400 << 10)  # type: ignore[arg-type]
    assert loader.restore(ImageRef("a", "1", "cpu")).source == "store"
    # Chunks used within the last minute may be another process's read in progress and are
    # never evicted: make a's last use two minutes old (its verified markers' times).
    old = time.time() - 120
    for marker in cache.rglob("*.ok"):
        os.utime(marker, (old, old))
    assert loader.restore(ImageRef("b", "1", "cpu")).source == "store"
    count, nbytes = loader.eviction_counts()["node"]
    assert count >= 1 and nbytes >= 256 * 256 * 4
    assert read_counts(cache).evictions == count and read_counts(cache).evicted_bytes == nbytes
    assert loader.restore(ImageRef("b", "1", "cpu")).source == "cache"


def test_a_directory_store_is_read_in_place_not_copied_into_the_cache(tmp_path: Path) -> None:
    build_image(_model(tmp_path / "repo", "a", 0), DirStore(tmp_path / "store"))
    loader = ImageLoader(str(tmp_path / "store"), tmp_path / "cache", "cpu")
    assert loader.restore(ImageRef("a", "1", "cpu")).source == "store"
    assert not list((tmp_path / "cache").glob("chunks/*/*"))  # nothing copied: it is local


def test_a_changed_chunk_in_a_directory_store_is_refused_naming_it(tmp_path: Path) -> None:
    import pytest

    from snapshotter import IntegrityError

    build_image(_model(tmp_path / "repo", "a", 0), DirStore(tmp_path / "store"))
    chunk = next(p for p in (tmp_path / "store").glob("chunks/*/*") if p.suffix != ".ok")
    data = bytearray(chunk.read_bytes())
    data[100] ^= 0xFF
    chunk.write_bytes(bytes(data))  # its marker no longer matches: the chunk is hashed
    loader = ImageLoader(str(tmp_path / "store"), tmp_path / "cache", "cpu")
    with pytest.raises(IntegrityError, match=chunk.name):
        loader.restore(ImageRef("a", "1", "cpu"))
