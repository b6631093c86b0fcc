"""Build from safetensors / TorchScript into a directory store and restore through a cache."""

from __future__ import annotations

import io
import struct
import threading
from pathlib import Path

import numpy as np
import pytest

from snapshotter import (
    Arena,
    BuildError,
    ImageLoader,
    IntegrityError,
    build_image,
    source_digest,
)
from snapshotter.image_ref import ImageRef
from snapshotter.pvc_cache import CacheEntry, NodeCache, plan_eviction
from snapshotter.stores.dir_store import DirStore
from tests.fixtures.safetensors_files import write_safetensors


@pytest.fixture
def st_model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    arrays = {
        "embed.weight": rng.standard_normal((300, 64)).astype(np.float32),
        "norm.bias": rng.standard_normal(64).astype(np.float16),
        "proj.weight_bf16": rng.integers(0, 2**16, (64, 32), dtype=np.uint16),
        "step": np.array([7], dtype=np.int64),
    }
    dtypes = {"float32": "F32", "float16": "F16", "uint16": "BF16", "int64": "I64"}
    version = tmp_path / "repo" / "llm" / "1"
    version.mkdir(parents=True)
    write_safetensors(
        version / "model.safetensors",
        {n: (dtypes[a.dtype.name], a.shape, a.tobytes()) for n, a in arrays.items()},
    )
    return version, arrays


def test_safetensors_restore_is_bit_exact_with_bf16_as_torch(
    st_model: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    import torch

    version, arrays = st_model
    manifest = build_image(version, DirStore(tmp_path / "store"), max_chunk_bytes=64 << 10)
    assert len(manifest.chunks) > 1
    loader = ImageLoader(str(tmp_path / "store"), tmp_path / "cache", "cpu")
    ref = loader.find("llm", "1", source_digest(version))
    assert ref is not None
    img = loader.restore(ref)
    for name, array in arrays.items():
        assert np.array_equal(img.tensors[name], array), name
        assert img.tensors[name].ctypes.data % 4096 == 0  # aligned views in one arena
    views = img.torch_tensors()
    assert views["proj.weight_bf16"].dtype == torch.bfloat16
    assert views["embed.weight"].data_ptr() == img.tensors["embed.weight"].ctypes.data
    assert set(img.timings) >= {"fetch", "read", "total"}


def test_restore_into_a_prefaulted_arena(
    st_model: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    version, arrays = st_model
    build_image(version, DirStore(tmp_path / "store"))
    loader = ImageLoader(None, tmp_path / "store", "cpu")
    arena = Arena(1 << 20)
    assert arena.prefault() >= 0 and arena.prefaulted
    img = loader.restore(ImageRef("llm", "1", "cpu"), arena)
    assert img.arena is arena and img.source == "cache"
    assert np.array_equal(img.tensors["embed.weight"], arrays["embed.weight"])
    fresh = loader.restore(ImageRef("llm", "1", "cpu"))  # no arena given: one of its size
    assert fresh.arena is not arena and fresh.arena.nbytes == fresh.manifest.arena_bytes


def test_corrupt_cache_without_a_store_is_refused_naming_the_chunk(
    st_model: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    version, _ = st_model
    manifest = build_image(version, DirStore(tmp_path / "cache"))
    chunk = DirStore(tmp_path / "cache").chunk_file(manifest.chunks[0].digest)
    data = bytearray(chunk.read_bytes())
    data[0] ^= 1
    chunk.write_bytes(bytes(data))
    loader = ImageLoader(None, tmp_path / "cache", "cpu")
    with pytest.raises(IntegrityError, match=manifest.chunks[0].digest):
        loader.restore(ImageRef("llm", "1", "cpu"))
    assert not chunk.exists()  # a corrupt entry is deleted, never served later


def test_full_verify_catches_corruption_that_keeps_mtime(
    st_model: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    import os

    version, arrays = st_model
    build_image(version, DirStore(tmp_path / "store"))
    manifest = build_image(version, DirStore(tmp_path / "cache"))
    chunk = DirStore(tmp_path / "cache").chunk_file(manifest.chunks[0].digest)
    st = chunk.stat()
    data = bytearray(chunk.read_bytes())
    data[5000] ^= 1
    chunk.write_bytes(bytes(data))
    os.utime(chunk, ns=(st.st_atime_ns, st.st_mtime_ns))  # bit rot: same size, same mtime
    loader = ImageLoader(str(tmp_path / "store"), tmp_path / "cache", "cpu", verify="full")
    img = loader.restore(ImageRef("llm", "1", "cpu"))
    assert img.source == "store"
    assert np.array_equal(img.tensors["embed.weight"], arrays["embed.weight"])


def test_torchscript_build_keeps_tied_weights_tied(tmp_path: Path) -> None:
    import torch

    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.b = torch.nn.Linear(8, 8)
            self.b.weight = self.a.weight

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x))

    version = tmp_path / "repo" / "tied" / "1"
    version.mkdir(parents=True)
    original = torch.jit.script(Tied().eval())
    torch.jit.save(original, str(version / "model.pt"))
    build_image(version, DirStore(tmp_path / "store"))
    img = ImageLoader(str(tmp_path / "store"), None, "cpu").restore(ImageRef("tied", "1", "cpu"))
    blob = img.artifact("torchscript_weightless")
    assert blob is not None
    module = torch.jit.load(io.BytesIO(blob))
    views = img.torch_tensors()
    with torch.no_grad():
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            tensor.set_(views[name])
    assert module.a.weight.data_ptr() == module.b.weight.data_ptr()
    x = torch.randn(3, 8)
    assert torch.equal(module(x), original(x))


@pytest.mark.parametrize(
    "payload",
    [b"", b"\x10\x00", struct.pack("<Q", 1 << 40) + b"{}", struct.pack("<Q", 2) + b"[]",
     struct.pack("<Q", 60) + b'{"w":{"dtype":"F32","shape":[1000],"data_offsets":[0,4000]}}'],
)  # fmt: skip
def test_hostile_safetensors_is_a_build_error(payload: bytes, tmp_path: Path) -> None:
    version = tmp_path / "bad" / "1"
    version.mkdir(parents=True)
    (version / "model.safetensors").write_bytes(payload)
    with pytest.raises(BuildError):
        build_image(version, DirStore(tmp_path / "store"))
    assert not (tmp_path / "store" / "images").exists()


def test_source_digest_follows_content(st_model: tuple[Path, dict[str, np.ndarray]]) -> None:
    version, _ = st_model
    first = source_digest(version)
    assert source_digest(version) == first
    (version / "config.extra").write_text("x")
    assert source_digest(version) != first


def test_eviction_is_lru_and_spares_the_image_in_use() -> None:
    entries = [CacheEntry("a", 100, 10.0), CacheEntry("b", 100, 20.0), CacheEntry("c", 100, 30.0)]
    kw = {"now": 1000.0, "keep": frozenset()}
    assert plan_eviction(entries, budget_bytes=300, incoming_bytes=0, **kw) == []  # type: ignore[arg-type]
    assert plan_eviction(entries, budget_bytes=300, incoming_bytes=150, **kw) == ["a", "b"]  # type: ignore[arg-type]
    assert plan_eviction(
        entries, budget_bytes=300, incoming_bytes=150, now=1000.0, keep=frozenset({"a"})
    ) == ["b", "c"]
    # used seconds ago: probably being read by another process, so spared
    assert (
        plan_eviction(entries, budget_bytes=0, incoming_bytes=0, now=40.0, keep=frozenset()) == []
    )


def test_cache_budget_evicts_other_images(tmp_path: Path) -> None:
    store = DirStore(tmp_path / "cache")
    old = store.chunk_file("e" * 64)
    store.write_chunk("e" * 64, memoryview(b"x" * 100_000))
    import os

    os.utime(old.with_name("e" * 64 + ".ok"), (0, 0))  # long unused
    cache = NodeCache(tmp_path / "cache", max_bytes=150_000)
    assert cache.make_room(100_000, keep=frozenset(), now=1e9) == ["e" * 64]
    assert not old.exists()


def test_image_lock_excludes_a_second_holder(tmp_path: Path) -> None:
    from snapshotter import StoreTimeout

    ref = ImageRef("m", "1", "cpu")
    first = NodeCache(tmp_path)
    second = NodeCache(tmp_path, lock_timeout_s=0.3)
    with first.image_lock(ref), pytest.raises(StoreTimeout, match="locked"), second.image_lock(ref):
        pass
    with second.image_lock(ref):
        pass


def test_arena_views_are_bounded() -> None:
    arena = Arena(8192)
    view = arena.view(4096, 16, "float32", (2, 2))
    view[:] = 1.5
    assert arena.array[4096:4112].view(np.float32).tolist() == [1.5] * 4
    from snapshotter import SnapshotError

    with pytest.raises(SnapshotError):
        arena.view(8000, 400, "uint8", (400,))
    with pytest.raises(SnapshotError):
        Arena(-1)
    threading.Thread(target=arena.prefault).run()


def test_torch_export_program_restores_with_identical_outputs(tmp_path: Path) -> None:
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1 = torch.nn.Linear(16, 32)
            self.bn = torch.nn.BatchNorm1d(32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.bn(self.l1(x)))

    net = Net().eval()
    x = torch.randn(4, 16)
    version = tmp_path / "repo" / "exported" / "1"
    version.mkdir(parents=True)
    torch.export.save(torch.export.export(net, (x,)), str(version / "model.pt2"))
    build_image(version, DirStore(tmp_path / "store"))
    ref = ImageRef("exported", "1", "cpu")
    img = ImageLoader(str(tmp_path / "store"), None, "cpu").restore(ref)
    blob = img.artifact("export_weightless")
    assert blob is not None and len(blob) < (version / "model.pt2").stat().st_size
    program = torch.export.load(io.BytesIO(blob))
    views = img.torch_tensors()
    for name, old in list(program.state_dict.items()):
        assert old.numel() == 0
        view = views[name]
        is_param = isinstance(old, torch.nn.Parameter)
        program.state_dict[name] = (
            torch.nn.Parameter(view, requires_grad=False) if is_param else view
        )
    module = program.module()
    assert module.l1.weight.data_ptr() == views["l1.weight"].data_ptr()  # zero-copy
    assert torch.equal(module(x), net(x))
