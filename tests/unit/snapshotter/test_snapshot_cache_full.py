"""A full disk under the node cache while a restore fills it: a clean `SnapshotStoreError`
naming the chunk and the cause, no partial or unverified entry left, and the next restore
works once there is room again. The disk is `tests.fakes.full_disk.FullDisk` (ENOSPC at the
write seam); tests/integration/snapshotter/test_snapshot_cache_full_tmpfs.py does the same on
a real, small tmpfs where one can be mounted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from snapshotter import ImageLoader, SnapshotStoreError, build_image
from snapshotter.image_ref import ImageRef
from tests.fakes.full_disk import FullDisk
from tests.fakes.remote_store import RemoteStore
from tests.fixtures.safetensors_files import write_safetensors

REF = ImageRef("big", "1", "cpu")


def _image(tmp_path: Path) -> tuple[RemoteStore, np.ndarray]:
    version = tmp_path / "repo" / "big" / "1"
    version.mkdir(parents=True)
    weights = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)  # 1 MiB
    write_safetensors(
        version / "model.safetensors", {"w": ("F32", weights.shape, weights.tobytes())}
    )
    store = RemoteStore(tmp_path / "store")
    build_image(version, store._dir, max_chunk_bytes=256 << 10)
    return store, weights


def _leftovers(cache: Path) -> list[Path]:
    """Files a reader could take for cache content: chunks, markers, temp files, manifests."""
    return [p for p in cache.rglob("*") if p.is_file() and "locks" not in p.parts]


# Room for one chunk and a bit (the disk fills mid-chunk), and for one chunk exactly (its bytes
# fit, its verified marker does not).
@pytest.mark.parametrize("free_bytes", [300 << 10, 256 << 10])
def test_a_full_cache_disk_is_a_clean_error_and_leaves_no_entry(
    tmp_path: Path, free_bytes: int
) -> None:
    store, weights = _image(tmp_path)
    cache = tmp_path / "cache"
    loader = ImageLoader(None, cache, "cpu", store=store, direct_io=False)  # type: ignore[arg-type]
    disk = FullDisk(cache, free_bytes=free_bytes)
    with disk, pytest.raises(SnapshotStoreError, match=r"[0-9a-f]{64}.*No space left"):
        loader.restore(REF)
    assert disk.refused >= 1
    leftovers = _leftovers(cache)
    # What is left is whole and verified (a chunk that fit, with its marker), never a temp
    # file, an unverified chunk or a manifest naming chunks that are not there.
    assert not [p for p in leftovers if p.name.startswith(".")], leftovers
    assert not list(cache.glob("images/**/manifest.json"))
    cached = DirStoreView(cache)
    assert all(cached.verified(p) for p in leftovers if p.suffix != ".ok")
    # Room again: the next restore fetches what is missing and serves the right bytes.
    img = ImageLoader(None, cache, "cpu", store=store).restore(REF)  # type: ignore[arg-type]
    assert img.source == "store"
    assert np.array_equal(img.tensors["w"], weights)
    assert ImageLoader(None, cache, "cpu", store=store).restore(REF).source == "cache"  # type: ignore[arg-type]


def test_a_disk_that_fills_during_the_direct_io_tee_is_the_same_clean_error(
    tmp_path: Path,
) -> None:
    store, _ = _image(tmp_path)
    cache = tmp_path / "cache"
    loader = ImageLoader(None, cache, "cpu", store=store, direct_io=True)  # type: ignore[arg-type]
    with FullDisk(cache, free_bytes=0), pytest.raises(SnapshotStoreError, match="No space left"):
        loader.restore(REF)
    assert not [p for p in _leftovers(cache) if p.name.startswith(".")]


class DirStoreView:
    """The cache's own idea of a chunk file: verified (its marker matches) or not."""

    def __init__(self, root: Path) -> None:
        from snapshotter.stores.dir_store import DirStore

        self._store = DirStore(root)

    def verified(self, chunk_file: Path) -> bool:
        return self._store.is_verified(chunk_file.name, chunk_file.stat().st_size)
