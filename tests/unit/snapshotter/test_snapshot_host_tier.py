"""The shared host-memory tier: an image kept in a tmpfs file is mapped, not read, by others."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from snapshotter import ImageLoader, build_image
from snapshotter.errors import IntegrityError
from snapshotter.host_cache import HostCache, HostEntry, Piece, plan_expiry
from snapshotter.image_ref import ImageRef
from snapshotter.stores.dir_store import DirStore
from tests.fixtures.safetensors_files import write_safetensors
from thawserver.cache_counters import read_counts

REF = ImageRef("llm", "1", "cpu")


def _model(tmp_path: Path, name: str = "llm", seed: int = 0) -> tuple[Path, np.ndarray]:
    version = tmp_path / "repo" / name / "1"
    version.mkdir(parents=True)
    weights = np.random.default_rng(seed).standard_normal((256, 512)).astype(np.float32)
    write_safetensors(
        version / "model.safetensors", {"w": ("F32", weights.shape, weights.tobytes())}
    )
    return version, weights


def _wait_for_entry(tier: Path, timeout_s: float = 20.0) -> list[Path]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        entries = list(tier.glob("*.img"))
        if entries:
            return entries
        time.sleep(0.02)
    raise AssertionError(f"no host-tier entry appeared in {tier}")


def _loader(tmp_path: Path, tier: Path, max_bytes: int = 64 << 20) -> ImageLoader:
    return ImageLoader(
        None, tmp_path / "cache", "cpu", host_cache_dir=tier, host_max_bytes=max_bytes,
        host_publish_delay_s=0.0,
    )  # fmt: skip


def test_a_restored_image_is_kept_and_the_next_process_maps_it(tmp_path: Path) -> None:
    version, weights = _model(tmp_path)
    build_image(version, DirStore(tmp_path / "cache"))
    tier = tmp_path / "tier"
    first = _loader(tmp_path, tier).restore(REF)
    assert first.source == "cache"
    (entry,) = _wait_for_entry(tier)
    assert entry.stat().st_size == first.manifest.arena_bytes
    # Another process (its own loader, same directory) maps the kept image.
    code = (
        "import sys, numpy as np\n"
        "from snapshotter import ImageLoader\n"
        "from snapshotter.image_ref import ImageRef\n"
        f"l = ImageLoader(None, {str(tmp_path / 'cache')!r}, 'cpu', host_cache_dir={str(tier)!r},"
        " host_max_bytes=1 << 26)\n"
        "img = l.restore(ImageRef('llm', '1', 'cpu'))\n"
        "print(img.source, float(img.tensors['w'].sum()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    source, total = out.stdout.split()
    assert source == "host" and float(total) == pytest.approx(float(weights.sum()), rel=1e-5)


def test_a_mapped_image_is_copy_on_write(tmp_path: Path) -> None:
    version, weights = _model(tmp_path)
    build_image(version, DirStore(tmp_path / "cache"))
    tier = tmp_path / "tier"
    _loader(tmp_path, tier).restore(REF)
    _wait_for_entry(tier)
    mapped = _loader(tmp_path, tier).restore(REF)
    assert mapped.source == "host" and mapped.arena.prefaulted
    assert np.array_equal(mapped.tensors["w"], weights)
    mapped.tensors["w"][:] = 0  # a model writing its weights changes only its own copy
    again = _loader(tmp_path, tier).restore(REF)
    assert again.source == "host" and np.array_equal(again.tensors["w"], weights)


def test_the_tier_evicts_the_least_recently_used_image_and_counts_it(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    loaders = []
    for i, name in enumerate(("a", "b")):
        version, _ = _model(tmp_path, name, seed=i)
        build_image(version, DirStore(tmp_path / "cache"))
        # Room for one image only (each is 512 KiB + alignment).
        loaders.append(_loader(tmp_path, tier, max_bytes=900 << 10))
        loaders[-1].restore(ImageRef(name, "1", "cpu"))
        deadline = time.monotonic() + 20
        while len(loaders[-1].host.entries()) != 1 or loaders[-1].host.published == 0:
            assert time.monotonic() < deadline, "the image was not kept"
            time.sleep(0.02)
    assert loaders[1].host.evictions == 1  # "a" went to make room for "b"
    assert read_counts(tier).evictions == 1 and read_counts(tier).evicted_bytes > 500_000
    assert _loader(tmp_path, tier).restore(ImageRef("a", "1", "cpu")).source == "cache"
    assert _loader(tmp_path, tier).restore(ImageRef("b", "1", "cpu")).source == "host"


def test_an_image_larger_than_the_budget_is_never_kept(tmp_path: Path) -> None:
    version, _ = _model(tmp_path)
    build_image(version, DirStore(tmp_path / "cache"))
    tier = tmp_path / "tier"
    loader = _loader(tmp_path, tier, max_bytes=100_000)
    loader.restore(REF)
    time.sleep(0.3)
    assert loader.host.entries() == [] and loader.restore(REF).source == "cache"


def test_a_half_written_entry_is_invisible_and_a_wrong_size_is_ignored(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    host = HostCache(tier, max_bytes=1 << 20)
    dead = subprocess.Popen(["true"])
    dead.wait()
    temp = tier / f".tmp-{dead.pid}-1-abc"
    temp.write_bytes(b"x" * 4096)  # a writer died here
    assert host.get("abc", 4096) is None
    (tier / "def.img").write_bytes(b"x" * 100)
    assert host.get("def", 4096) is None and host.misses == 2
    src = tmp_path / "chunk"
    src.write_bytes(bytes(range(256)) * 16)
    assert host.publish("abc", 8192, [Piece(src, 4096, 4096)])
    arena = host.get("abc", 8192)
    assert arena is not None and bytes(arena.array[4096:4352]) == bytes(range(256))
    assert bytes(arena.array[:4096]) == bytes(4096)  # the alignment gap stays zero
    assert not temp.exists()  # swept: its writer is gone
    assert not host.publish("abc", 8192, [Piece(src, 4096, 4096)])  # already kept


def test_an_opened_entry_reads_whole_even_after_its_eviction(tmp_path: Path) -> None:
    host = HostCache(tmp_path / "tier", max_bytes=1 << 20)
    src = tmp_path / "chunk"
    src.write_bytes(bytes(range(256)) * 16)
    assert host.publish("abc", 8192, [Piece(src, 4096, 4096)])
    assert host.open_entry("abc", 4096) is None and host.misses == 1  # not this size
    assert host.open_entry("xyz", 8192) is None and host.misses == 2
    fd = host.open_entry("abc", 8192)
    assert fd is not None and host.hits == 1
    try:
        host.path_of("abc").unlink()  # evicted while a restore reads it
        assert os.pread(fd, 256, 4096) == bytes(range(256))
        assert os.pread(fd, 4096, 0) == bytes(4096)
    finally:
        os.close(fd)


def test_expiry_plan_drops_old_then_least_recent_over_budget() -> None:
    entries = [HostEntry("a", 400, 1.0), HostEntry("b", 400, 5.0), HostEntry("c", 400, 9.0)]
    assert plan_expiry(entries, now=10.0, retention_s=100, max_bytes=1200) == []
    assert [e.name for e in plan_expiry(entries, now=10.0, retention_s=100, max_bytes=800)] == ["a"]
    assert [e.name for e in plan_expiry(entries, now=10.0, retention_s=6, max_bytes=800)] == ["a"]
    assert [e.name for e in plan_expiry(entries, now=10.0, retention_s=100, max_bytes=0)] == [
        "a",
        "b",
        "c",
    ]


def test_snapshot_pull_can_fill_the_host_tier_at_once(tmp_path: Path) -> None:
    version, weights = _model(tmp_path)
    build_image(version, DirStore(tmp_path / "store"))
    tier = tmp_path / "tier"
    argv = [sys.executable, "-m", "thaw.cli", "snapshot", "pull", "llm",
            "--store", str(tmp_path / "store"), "--cache", str(tmp_path / "cache"),
            "--host-cache", str(tier), "--host-cache-bytes", str(8 << 20)]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "kept" in out.stdout and "not kept" not in out.stdout
    mapped = _loader(tmp_path, tier).restore(REF)  # the very first restore maps it
    assert mapped.source == "host" and np.array_equal(mapped.tensors["w"], weights)


def test_a_cache_chunk_replaced_before_the_tier_copies_it_is_never_kept(tmp_path: Path) -> None:
    # The tier copies chunk files in the background, after the restore verified them: a file
    # renamed over a chunk's path meanwhile (another fill, a GC, a corrupt copy) is not the
    # file its verified marker names, so the image is not kept (wakes would map its bytes
    # unhashed, to the GPU too).
    version, _ = _model(tmp_path)
    build_image(version, DirStore(tmp_path / "cache"))
    tier = tmp_path / "tier"
    loader = ImageLoader(
        None, tmp_path / "cache", "cpu", host_cache_dir=tier, host_max_bytes=64 << 20,
        host_publish_delay_s=0.5,
    )  # fmt: skip
    image = loader.restore(REF)
    path = DirStore(tmp_path / "cache").chunk_file(image.manifest.chunks[0].digest)
    other = path.with_name("other")
    other.write_bytes(bytes(b ^ 0xFF for b in path.read_bytes()))
    os.replace(other, path)  # well within the publish delay
    for thread in threading.enumerate():
        if thread.name == "thaw-host-tier":
            thread.join(timeout=20)
    assert list(tier.glob("*.img")) == []


def test_a_piece_whose_file_is_not_trusted_fails_the_publish(tmp_path: Path) -> None:
    src = tmp_path / "chunk"
    src.write_bytes(b"x" * 4096)
    host = HostCache(tmp_path / "tier", max_bytes=1 << 20)
    seen: list[int] = []

    def trusted(st: os.stat_result) -> bool:
        seen.append(st.st_ino)
        return False

    with pytest.raises(IntegrityError, match="not the verified chunk file"):
        host.publish("abc", 4096, [Piece(src, 0, 4096, trusted)])
    assert seen == [src.stat().st_ino]  # asked about the file it copied
    assert [p.name for p in (tmp_path / "tier").iterdir()] == [".lock"]  # no entry, no temp


def test_wait_published_returns_once_the_background_publish_is_done(tmp_path: Path) -> None:
    host = HostCache(tmp_path / "tier", max_bytes=1 << 20, publish_delay_s=0.3)
    assert host.wait_published(0.0)  # nothing under way
    src = tmp_path / "chunk"
    src.write_bytes(bytes(range(256)) * 16)
    host.publish_later("abc", 8192, [Piece(src, 4096, 4096)])
    assert not host.wait_published(0.05)  # still in its delay
    assert host.wait_published(10.0)
    assert host.path_of("abc").exists() and host.published == 1
