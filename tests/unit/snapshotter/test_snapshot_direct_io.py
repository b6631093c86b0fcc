"""O_DIRECT reads into the arena and O_DIRECT cache fills: bit-exact, used only where aligned
and cold, and ordinary I/O wherever O_DIRECT does not apply."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from snapshotter import Arena, IntegrityError
from snapshotter import parallel_read as pr
from snapshotter.direct_io import ALIGN, address, aligned_prefix, cached_fraction, open_direct
from snapshotter.pvc_cache import NodeCache
from snapshotter.stores.dir_store import DirStore

# A size with an unaligned tail, spanning several pieces of PIECE below.
SIZE = 5 * ALIGN * 16 + 1234
PIECE = 3 * ALIGN * 8


def _data(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def _cold_file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return _drop(path)


def _drop(path: Path) -> Path:
    """Write back and evict `path` from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return path


def _can_tell_cold(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        return cached_fraction(fd, 0, 1) is not None
    finally:
        os.close(fd)


def _direct_supported(path: Path) -> bool:
    fd = open_direct(path, os.O_RDONLY)
    if fd is None:
        return False
    os.close(fd)
    return True


def _unaligned_bytes(n: int) -> memoryview:
    """`n` writable bytes of a bytearray whose first byte is not ALIGN-aligned. A bytearray's
    address is only 16-byte aligned: once the heap has grown past malloc's mmap threshold one
    of this size lands on a page boundary about one time in 200, depending on what ran
    before in the process, and is then rightly read with O_DIRECT."""
    buf = bytearray(n + ALIGN)
    start = address(memoryview(buf))
    assert start is not None
    skip = 8 if start % ALIGN == 0 else 0
    return memoryview(buf)[skip : skip + n]


Call = tuple[str, int, int, bool]


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[Call]:
    """Records `(tag, start, until, direct)` of every read `parallel_read` issues."""
    calls: list[Call] = []
    real = pr._pread

    def recording(*args: Any, done: int = 0, direct: bool = False) -> int:
        calls.append((args[1].tag, done, args[4], direct))
        return real(*args, done=done, direct=direct)

    monkeypatch.setattr(pr, "_pread", recording)
    return calls


def test_aligned_prefix_needs_aligned_memory_and_offset() -> None:
    arena = Arena(4 * ALIGN)
    view = arena.memoryview(0, 2 * ALIGN + 100)
    assert aligned_prefix(view, 0) == 2 * ALIGN
    assert aligned_prefix(view, ALIGN * 7) == 2 * ALIGN
    assert aligned_prefix(view, 512) == 0  # unaligned file offset
    assert aligned_prefix(arena.memoryview(8, ALIGN), 0) == 0  # unaligned memory
    assert aligned_prefix(arena.memoryview(0, 100), 0) == 0  # shorter than one block
    assert aligned_prefix(memoryview(bytes(2 * ALIGN)), 0) == 0  # read-only memory


def test_cold_pieces_are_read_direct_warm_ones_buffered(tmp_path: Path, spy: list[Call]) -> None:
    data = _data(SIZE)
    path = _cold_file(tmp_path / "chunk", data)
    if not _direct_supported(path) or not _can_tell_cold(path):
        pytest.skip("no O_DIRECT or no cachestat on this filesystem/kernel")
    arena = Arena(SIZE + ALIGN)
    pr.read_into(
        [pr.ReadJob(path, 0, arena.memoryview(0, SIZE), "c")],
        threads=3,
        piece_bytes=PIECE,
        direct=True,
    )
    assert arena.array[:SIZE].tobytes() == data
    direct = [c for c in spy if c[3]]
    assert sum(until - start for _, start, until, _ in direct) == SIZE // ALIGN * ALIGN
    # The unaligned tail went through an ordinary read.
    assert any(not d and until - start == SIZE % ALIGN for _, start, until, d in spy)

    spy.clear()
    path.read_bytes()  # now warm: every piece is an ordinary read
    again = Arena(SIZE)
    pr.read_into(
        [pr.ReadJob(path, 0, again.memoryview(0, SIZE), "c")],
        threads=2,
        piece_bytes=PIECE,
        direct=True,
    )
    assert again.array[:SIZE].tobytes() == data
    assert spy and not any(d for *_, d in spy)


def test_unaligned_destinations_and_offsets_fall_back_to_ordinary_reads(
    tmp_path: Path, spy: list[Call]
) -> None:
    data = _data(SIZE + 3 * ALIGN, seed=1)
    path = _cold_file(tmp_path / "blob", data)
    into_bytes = _unaligned_bytes(SIZE)
    arena = Arena(2 * SIZE)
    odd = arena.memoryview(ALIGN, SIZE)
    # One job at a time, each on a cold file: with both in one call the first one read
    # warms the pages the other then reads, and whether O_DIRECT was even considered
    # depended on which thread ran first.
    for job in (
        pr.ReadJob(path, 0, into_bytes, "b"),  # memory not page aligned
        pr.ReadJob(path, 100, odd, "o"),  # file offset not aligned
    ):
        _drop(path)
        pr.read_into([job], threads=2, piece_bytes=PIECE, direct=True)
    assert bytes(into_bytes) == data[:SIZE]
    assert odd.tobytes() == data[100 : 100 + SIZE]
    assert {tag for tag, *_ in spy} == {"b", "o"}
    assert not any(direct for *_, direct in spy)


def test_a_truncated_cold_file_is_an_integrity_error(tmp_path: Path) -> None:
    path = _cold_file(tmp_path / "short", _data(SIZE // 2))
    arena = Arena(SIZE)
    with pytest.raises(IntegrityError, match="truncated"):
        pr.read_into(
            [pr.ReadJob(path, 0, arena.memoryview(0, SIZE), "short")],
            threads=2,
            piece_bytes=PIECE,
            direct=True,
        )


def test_open_direct_is_none_where_it_cannot_open(tmp_path: Path) -> None:
    assert open_direct(tmp_path / "missing", os.O_RDONLY) is None


@pytest.mark.parametrize("direct", [True, False])
def test_cache_fill_writes_aligned_pieces_direct_and_the_rest_normally(
    tmp_path: Path, direct: bool
) -> None:
    data = _data(SIZE, seed=2)
    arena = Arena(SIZE + ALIGN)
    arena.array[:SIZE] = np.frombuffer(data, np.uint8)
    cache = NodeCache(tmp_path / "cache", direct_io=direct)
    digest = "ab" * 32
    fill = cache.begin_fill(digest, SIZE)
    assert (fill._direct is not None) == (direct and _direct_supported(fill._temp))
    # Out of order, one piece from unaligned memory (bytes), the tail unaligned in length.
    pieces = [(off, min(PIECE, SIZE - off)) for off in range(0, SIZE, PIECE)]
    for off, n in reversed(pieces):
        source = arena.memoryview(off, n) if off else memoryview(bytearray(data[off : off + n]))
        fill.write(off, source)
    fill.commit()
    store = cache.store
    assert store.chunk_file(digest).read_bytes() == data
    assert store.is_verified(digest, SIZE)


def test_dir_store_reads_cold_chunks_exactly(tmp_path: Path) -> None:
    store = DirStore(tmp_path / "store")
    data = _data(SIZE, seed=3)
    digest = "cd" * 32
    store.write_chunk(digest, memoryview(data))
    _drop(store.chunk_file(digest))
    arena = Arena(SIZE)
    store.read_chunk_into(digest, arena.memoryview(0, SIZE), on_bytes=None)
    assert arena.array[:SIZE].tobytes() == data


def test_cached_fraction_tells_warm_from_cold(tmp_path: Path) -> None:
    path = tmp_path / "probe"
    path.write_bytes(_data(SIZE, seed=4))
    fd = os.open(path, os.O_RDONLY)
    try:
        if cached_fraction(fd, 0, SIZE) is None:
            pytest.skip("no cachestat on this kernel")
        os.pread(fd, SIZE, 0)
        assert cached_fraction(fd, 0, SIZE) == 1.0
        _drop(path)
        cold = cached_fraction(fd, 0, SIZE)
        assert cold is not None and cold < 0.5
        os.pread(fd, 2 * ALIGN, 0)  # only the first pages come back (plus readahead)
        assert cached_fraction(fd, 0, ALIGN) == 1.0
        assert cached_fraction(fd, 0, 0) is None  # nothing to ask about
    finally:
        os.close(fd)
