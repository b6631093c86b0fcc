"""A real full disk: the node cache on a 256 KiB tmpfs while a restore from S3 (moto, through
the fault proxy) fills it. Needs CAP_SYS_ADMIN to mount (root in CI's container); skipped,
saying so, elsewhere: tests/unit/snapshotter/test_snapshot_cache_full.py covers the same
behaviour with ENOSPC injected at the write seam."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_images import publish

from snapshotter import ImageLoader, SnapshotStoreError
from snapshotter.image_ref import ImageRef
from snapshotter.stores.dir_store import DirStore

pytestmark = pytest.mark.integration


def _mount(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "cache"
    root.mkdir()
    try:
        mounted = _mount(["-t", "tmpfs", "-o", "size=256k", "tmpfs", str(root)])
    except FileNotFoundError:
        pytest.skip("no mount(8) here")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()})")
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def test_a_full_tmpfs_cache_fails_cleanly_then_works_once_it_has_room(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str], small_disk: Path
) -> None:
    store = publish(model_repo, tmp_path, "tmpfs-full", "mlp_onnx")
    ref = ImageRef("mlp_onnx", "1", "cpu")
    with pytest.raises(SnapshotStoreError, match="No space left on device"):
        ImageLoader(None, small_disk, "cpu", store=store).restore(ref)
    files = [p for p in small_disk.rglob("*") if p.is_file() and "locks" not in p.parts]
    assert not [p for p in files if p.name.startswith(".")], "a temp file was left behind"
    assert not list(small_disk.glob("images/**/manifest.json"))
    cache = DirStore(small_disk)
    for chunk in (p for p in files if p.parent.parent.name == "chunks" and p.suffix != ".ok"):
        assert cache.is_verified(chunk.name, chunk.stat().st_size), f"{chunk} is unverified"
    assert _mount(["-o", "remount,size=8m", str(small_disk)]).returncode == 0
    img = ImageLoader(None, small_disk, "cpu", store=store).restore(ref)
    assert img.source == "store"
    built = DirStore(tmp_path / "built")
    for chunk, base in zip(img.manifest.chunks, img.manifest.chunk_bases, strict=True):
        assert (
            img.arena.array[base : base + chunk.size].tobytes()
            == built.chunk_file(chunk.digest).read_bytes()
        )
    assert ImageLoader(None, small_disk, "cpu", store=store).restore(ref).source == "cache"
