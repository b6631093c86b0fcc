"""`gc` with a grace period on a directory store: unreferenced chunks younger than the grace
period survive (a concurrent build uploads chunks before its manifest), older ones go, and a
chunk reused by a build after the plan was made is not deleted."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from snapshotter import SnapshotError, build_image
from snapshotter.stores import StoredChunk
from snapshotter.stores.dir_store import DirStore
from snapshotter.transfer import copy_image, delete_garbage, plan_gc, select_garbage

HOUR = 3600.0


def tiny_model(root: Path, seed: int) -> Path:
    """A one-tensor safetensors model version directory."""
    raw = np.random.default_rng(seed).standard_normal(2048).astype(np.float32).tobytes()
    head = json.dumps({"w": {"dtype": "F32", "shape": [2048], "data_offsets": [0, len(raw)]}})
    version = root / f"m{seed}" / "1"
    version.mkdir(parents=True)
    (version / "model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head.encode() + raw)
    return version


def orphan(store: DirStore, fill: str, age_s: float) -> str:
    """An unreferenced chunk whose file (and marker) were written `age_s` ago."""
    digest = fill * 32
    store.write_chunk(digest, memoryview(b"nobody references me " + fill.encode()))
    age(store, digest, age_s)
    return digest


def age(store: DirStore, digest: str, age_s: float) -> None:
    """Backdate a chunk file and its verified marker (re-marked, so it stays verified)."""
    then = time.time() - age_s
    os.utime(store.chunk_file(digest), (then, then))
    store.mark_verified(digest)
    os.utime(store.chunk_file(digest).with_name(digest + ".ok"), (then, then))


def test_select_garbage_keeps_recent_and_referenced_chunks() -> None:
    chunks = {
        "old": StoredChunk(10, 1000.0),
        "young": StoredChunk(20, 1000.0 + 3000),
        "future": StoredChunk(40, 1000.0 + 9999),  # clock skew: counts as recent
        "used": StoredChunk(30, 0.0),
    }
    plan = select_garbage(chunks, {"used"}, grace_s=HOUR, now=1000.0 + HOUR)
    assert plan.unreferenced == {"old": 10}
    assert plan.recent == {"young": 20, "future": 40}
    assert plan.nbytes == 10
    everything = select_garbage(chunks, {"used"}, grace_s=0, now=1000.0 + HOUR)
    assert everything.unreferenced == {"old": 10, "young": 20}  # "future" is still ahead
    with pytest.raises(SnapshotError, match="grace"):
        select_garbage(chunks, set(), grace_s=-1, now=0)


def test_a_chunk_newer_than_the_grace_period_survives_unreferenced(tmp_path: Path) -> None:
    store = DirStore(tmp_path / "store")
    manifest = build_image(tiny_model(tmp_path / "repo", 1), store)
    fresh, stale = orphan(store, "ab", age_s=60), orphan(store, "cd", age_s=2 * HOUR)
    plan = plan_gc(store, grace_s=HOUR, now=time.time())
    assert set(plan.unreferenced) == {stale}
    assert set(plan.recent) == {fresh}
    assert delete_garbage(store, plan, grace_s=HOUR, clock=time.time) == [stale]
    assert store.chunk_size(fresh) is not None and store.chunk_size(stale) is None
    for chunk in manifest.chunks:  # referenced chunks are never candidates
        assert store.chunk_size(chunk.digest) == chunk.size


def test_race_a_build_reusing_an_old_chunk_after_the_plan_keeps_it(tmp_path: Path) -> None:
    """gc plans while a push is in flight; the push then reuses an old unreferenced chunk
    (touching it) and writes its manifest; the deletion re-checks and keeps the chunk."""
    src, dst = DirStore(tmp_path / "src"), DirStore(tmp_path / "dst")
    version = tiny_model(tmp_path / "repo", 2)
    manifest = build_image(version, src)
    build_image(version, dst)  # same chunks in dst...
    dst.delete_manifest(manifest.ref)  # ...but no manifest references them any more
    for chunk in manifest.chunks:
        age(dst, chunk.digest, 2 * HOUR)
    plan = plan_gc(dst, grace_s=HOUR, now=time.time())
    assert set(plan.unreferenced) >= {c.digest for c in manifest.chunks}

    copy_image(src, dst, manifest.ref)  # skips the upload, touches the reused chunks
    deleted = delete_garbage(dst, plan, grace_s=HOUR, clock=time.time)
    assert not set(deleted) & {c.digest for c in manifest.chunks}
    for chunk in manifest.chunks:
        assert dst.chunk_size(chunk.digest) == chunk.size
        assert dst.is_verified(chunk.digest, chunk.size)  # touching keeps the marker valid
    assert (
        plan_gc(dst, grace_s=0, now=time.time() + 1)
        .unreferenced.keys()
        .isdisjoint({c.digest for c in manifest.chunks})
    )


def test_touch_of_a_missing_chunk_reports_it(tmp_path: Path) -> None:
    store = DirStore(tmp_path / "store")
    assert store.touch_chunk("ef" * 32) is False
    digest = orphan(store, "ef", age_s=2 * HOUR)
    assert store.touch_chunk(digest) is True
    stat = store.chunk_stat(digest)
    assert stat is not None and time.time() - stat.modified < 60


def thaw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "thaw.cli", "snapshot", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_cli_gc_default_grace_keeps_a_fresh_orphan(tmp_path: Path) -> None:
    store = DirStore(tmp_path / "store")
    build_image(tiny_model(tmp_path / "repo", 3), store)
    fresh, stale = orphan(store, "ab", age_s=10), orphan(store, "cd", age_s=2 * HOUR)
    out = thaw("gc", "--store", str(tmp_path / "store"))
    assert out.returncode == 0, out.stderr
    assert f"deleted {stale}" in out.stdout and fresh not in out.stdout
    assert "1 unreferenced chunks kept" in out.stdout
    assert store.chunk_size(fresh) is not None and store.chunk_size(stale) is None
    zero = thaw("gc", "--store", str(tmp_path / "store"), "--grace-s", "0")
    assert zero.returncode == 0 and f"deleted {fresh}" in zero.stdout
    for bad in ("-1", "nan", "soon"):
        refused = thaw("gc", "--store", str(tmp_path / "store"), "--grace-s", bad)
        assert refused.returncode == 2 and "--grace-s" in refused.stderr


def test_unpacked_archives_no_manifest_references_go_after_the_grace_period(
    tmp_path: Path,
) -> None:
    from snapshotter.transfer import unpacked_garbage

    store = DirStore(tmp_path / "cache")
    build_image(tiny_model(tmp_path / "repo", 1), store)
    plan = plan_gc(store, grace_s=HOUR, now=time.time())
    referenced = sorted(plan.referenced)[0]
    unpacked = tmp_path / "cache" / "unpacked"
    for name in (referenced, "a" * 64, "b" * 64, ".c-in-progress"):
        (unpacked / name).mkdir(parents=True)
    old = time.time() - 2 * HOUR
    for name in (referenced, "a" * 64, ".c-in-progress"):
        os.utime(unpacked / name, (old, old))
    gone = unpacked_garbage(tmp_path / "cache", plan, grace_s=HOUR, now=time.time())
    assert [p.name for p in gone] == ["a" * 64]  # referenced, recent and temporaries stay
    assert unpacked_garbage(tmp_path / "nothing", plan, grace_s=HOUR, now=time.time()) == []


def test_a_restore_from_the_node_cache_unpacks_archives_under_it(tmp_path: Path) -> None:
    from snapshotter import ImageLoader

    version = tiny_model(tmp_path / "repo", 2)
    build_image(version, DirStore(tmp_path / "cache"))
    loader = ImageLoader(None, tmp_path / "cache", "cpu")
    ref = loader.find("m2", "1", None)
    assert ref is not None
    assert loader.restore(ref).unpack_root == tmp_path / "cache" / "unpacked"
    assert ImageLoader(str(tmp_path / "cache"), None, "cpu").restore(ref).unpack_root is None
