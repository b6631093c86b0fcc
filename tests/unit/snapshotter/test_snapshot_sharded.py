"""LLM-shaped checkpoints: sharded safetensors + index + tokenizer files in one image, and the
bad directories a build refuses (missing, truncated or unnamed shards, paths out of the dir)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from snapshotter import BuildError, ImageLoader, IntegrityError, build_image, source_digest
from snapshotter.errors import ManifestError
from snapshotter.image_ref import ImageRef
from snapshotter.manifest import Manifest
from snapshotter.stores.dir_store import DirStore
from snapshotter.transfer import plan_gc
from tests.fixtures.sharded_checkpoint import (
    INDEX,
    TOKENIZER_FILES,
    make_sharded_checkpoint,
    shard_name,
)

REF = ImageRef("llm", "1", "cpu")


@pytest.fixture
def checkpoint(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    version = tmp_path / "repo" / "llm" / "1"
    return version, make_sharded_checkpoint(version, shards=12)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_sharded_checkpoint_restores_weights_and_tokenizer_files(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    version, tensors = checkpoint
    manifest = build_image(version, DirStore(tmp_path / "store"), max_chunk_bytes=1 << 20)
    assert manifest.format_version == 3 and len(manifest.chunks) > 1
    assert [s.name for s in manifest.shards] == [shard_name(k, 12) for k in range(1, 13)]
    for shard in manifest.shards:
        assert shard.digest == _sha(version / shard.name)
        assert shard.size == (version / shard.name).stat().st_size
    assert set(manifest.files) == {INDEX, *TOKENIZER_FILES}
    for name, entry in manifest.files.items():
        assert entry.digest == _sha(version / name), name

    loader = ImageLoader(str(tmp_path / "store"), tmp_path / "cache", "cpu")
    ref = loader.find("llm", "1", source_digest(version))
    assert ref == REF
    image = loader.restore(REF)
    assert set(image.tensors) == set(tensors)
    for name, array in tensors.items():
        assert np.array_equal(image.tensors[name], array), name
    assert image.files_dir is not None and image.files_dir.is_relative_to(tmp_path / "cache")
    assert sorted(p.name for p in image.files_dir.iterdir()) == sorted(manifest.files)
    for name in manifest.files:
        assert (image.files_dir / name).read_bytes() == (version / name).read_bytes(), name
    # A second restore (another process, say) finds the directory written and reuses it.
    assert loader.restore(REF).files_dir == image.files_dir


def test_the_manifest_round_trips_and_older_images_keep_their_version(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    version, _ = checkpoint
    manifest = build_image(version, DirStore(tmp_path / "store"))
    assert Manifest.from_json(manifest.to_json()) == manifest
    bare = tmp_path / "bare" / "llm" / "1"
    bare.mkdir(parents=True)
    os.link(version / shard_name(1, 12), bare / "model.safetensors")
    plain = build_image(bare, DirStore(tmp_path / "store2"))
    # A lone model.safetensors and nothing else: a version-1 manifest, as before.
    assert plain.format_version == 1 and plain.shards == () and plain.files == {}
    assert "shards" not in json.loads(plain.to_json())
    (bare / "tokenizer.json").write_text("{}")
    tokenized = build_image(bare, DirStore(tmp_path / "store3"))
    assert tokenized.format_version == 3 and [s.name for s in tokenized.shards] == [
        "model.safetensors"
    ]
    doc = json.loads(tokenized.to_json())
    doc["format_version"] = 2  # a version-2 reader's view: the file list is not read
    assert Manifest.from_json(json.dumps(doc).encode()).files == {}


@pytest.mark.parametrize("name", ["../x.json", "/etc/passwd", "a/b.json", ".hidden", "", "a\x00"])
def test_a_manifest_naming_a_file_outside_its_directory_is_refused(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path, name: str
) -> None:
    version, _ = checkpoint
    doc = json.loads(build_image(version, DirStore(tmp_path / "store")).to_json())
    doc["files"][name] = doc["files"].pop("tokenizer.json")
    with pytest.raises(ManifestError, match="file name"):
        Manifest.from_json(json.dumps(doc).encode())
    doc = json.loads(build_image(version, DirStore(tmp_path / "store")).to_json())
    doc["shards"][0]["name"] = name
    with pytest.raises(ManifestError, match="shard name"):
        Manifest.from_json(json.dumps(doc).encode())


def test_a_corrupt_tokenizer_blob_is_refused_and_nothing_is_written(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    version, _ = checkpoint
    store = DirStore(tmp_path / "store")
    manifest = build_image(version, store)
    blob = store.chunk_file(manifest.files["tokenizer.json"].digest)
    blob.write_bytes(blob.read_bytes().replace(b"BPE", b"XXX"))  # same size, other bytes
    loader = ImageLoader(str(tmp_path / "store"), tmp_path / "cache", "cpu")
    with pytest.raises(IntegrityError, match=manifest.files["tokenizer.json"].digest):
        loader.restore(REF)
    assert not (tmp_path / "cache" / "unpacked").exists()


def test_a_corrupt_weight_chunk_is_refused(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    version, _ = checkpoint
    store = DirStore(tmp_path / "store")
    manifest = build_image(version, store, max_chunk_bytes=1 << 20)
    chunk = store.chunk_file(manifest.chunks[-1].digest)
    data = bytearray(chunk.read_bytes())
    data[100] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=manifest.chunks[-1].digest):
        ImageLoader(str(tmp_path / "store"), tmp_path / "cache", "cpu").restore(REF)


def test_gc_keeps_the_model_files_and_their_directory(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    version, _ = checkpoint
    store = DirStore(tmp_path / "store")
    manifest = build_image(version, store)
    plan = plan_gc(store, grace_s=0, now=1e12)
    assert {f.digest for f in manifest.files.values()} <= plan.referenced
    assert manifest.files_dir_name in plan.referenced and not plan.unreferenced


def _build_error(version: Path, tmp_path: Path) -> str:
    with pytest.raises(BuildError) as info:
        build_image(version, DirStore(tmp_path / "store"))
    assert not (tmp_path / "store" / "images").exists()  # no manifest for a bad checkpoint
    return str(info.value)


def test_an_index_naming_a_shard_that_is_not_there_is_refused(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    version, _ = checkpoint
    (version / shard_name(7, 12)).unlink()
    message = _build_error(version, tmp_path)
    assert f"names shard {shard_name(7, 12)}, which is not in" in message


def test_a_missing_numbered_shard_is_refused_without_an_index(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    version, _ = checkpoint
    (version / INDEX).unlink()
    (version / shard_name(3, 12)).unlink()
    assert "model shard 3 of 12 is missing (have 11 of 12)" in _build_error(version, tmp_path)


def test_a_shard_the_index_does_not_name_is_left_out(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    # Mistral's repositories hold consolidated.safetensors beside the indexed shards: the same
    # tensors again. The index names the checkpoint, as transformers and vLLM read it.
    version, tensors = checkpoint
    (version / "consolidated.safetensors").write_bytes((version / shard_name(1, 12)).read_bytes())
    manifest = build_image(version, DirStore(tmp_path / "store"))
    assert "consolidated.safetensors" not in {s.name for s in manifest.shards}
    assert "consolidated.safetensors" not in manifest.files
    assert {t.name for t in manifest.tensors} == set(tensors)


def test_an_index_that_misplaces_a_tensor_is_refused(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    version, _ = checkpoint
    doc = json.loads((version / INDEX).read_text())
    doc["weight_map"]["model.layers.0.mlp.up_proj.weight"] = shard_name(2, 12)
    (version / INDEX).write_text(json.dumps(doc))
    message = _build_error(version, tmp_path)
    assert f"'model.layers.0.mlp.up_proj.weight' in {shard_name(2, 12)}" in message
    assert f"{shard_name(1, 12)} holds it" in message


def test_a_truncated_shard_is_refused(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    version, _ = checkpoint
    path = version / shard_name(5, 12)
    os.truncate(path, path.stat().st_size - 4096)
    message = _build_error(version, tmp_path)
    assert shard_name(5, 12) in message and "truncated" in message


@pytest.mark.parametrize(
    "shard", ["../outside.safetensors", "/etc/outside.safetensors", "sub/x.safetensors"]
)
def test_an_index_naming_a_path_is_refused(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path, shard: str
) -> None:
    version, _ = checkpoint
    (version.parent / "outside.safetensors").write_bytes(b"")
    doc = json.loads((version / INDEX).read_text())
    doc["weight_map"]["model.layers.0.mlp.up_proj.weight"] = shard
    (version / INDEX).write_text(json.dumps(doc))
    assert "not one plain file name" in _build_error(version, tmp_path)


@pytest.mark.parametrize("name", [shard_name(4, 12), "tokenizer.json"])
def test_a_symlink_out_of_the_directory_is_refused(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path, name: str
) -> None:
    version, _ = checkpoint
    outside = tmp_path / "outside" / name
    outside.parent.mkdir()
    (version / name).rename(outside)
    (version / name).symlink_to(outside)
    message = _build_error(version, tmp_path)
    assert f"{name} is a symlink to {outside}, outside the model directory" in message


def test_a_symlink_inside_the_directory_is_followed(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    version, _ = checkpoint
    (version / "blobs").mkdir()
    (version / "tokenizer.json").rename(version / "blobs" / "tok")
    (version / "tokenizer.json").symlink_to("blobs/tok")
    manifest = build_image(version, DirStore(tmp_path / "store"))
    assert manifest.files["tokenizer.json"].digest == _sha(version / "blobs" / "tok")


def test_a_fifo_in_the_directory_is_refused_not_read(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    version, _ = checkpoint
    os.mkfifo(version / "vocab.txt")
    result: list[str] = []
    worker = threading.Thread(target=lambda: result.append(_build_error(version, tmp_path)))
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "the build hung on a FIFO"
    assert result and "vocab.txt is not a regular file" in result[0]


def test_a_large_non_weight_file_is_refused_with_what_to_do(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    version, _ = checkpoint
    with (version / "pytorch_model.bin").open("wb") as f:
        f.truncate((256 << 20) + 1)  # sparse: no disk used
    message = _build_error(version, tmp_path)
    assert "pytorch_model.bin" in message and "move it out of the directory" in message


def test_on_a_device_every_shard_byte_goes_through_the_pinned_ring(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    import torch

    from snapshotter.cuda_restore import DeviceConfig
    from tests.fakes.fake_device import FakeDevice

    version, tensors = checkpoint
    manifest = build_image(version, DirStore(tmp_path / "cache"), max_chunk_bytes=1 << 20)
    ring = DeviceConfig(slot_bytes=64 << 10, ring_slots=3, read_threads=2, headroom_bytes=0)
    device = FakeDevice()
    try:
        loader = ImageLoader(
            None, tmp_path / "cache", "cpu", device=ring, copier_factory=lambda _: device,
            device_memory=device,
        )  # fmt: skip
        image = loader.restore(REF, device="cuda:0")
        assert image.device == "cuda:0" and image.tensors == {}
        views = image.torch_tensors()
        for name, array in tensors.items():
            assert torch.equal(views[name], torch.from_numpy(array)), name
        # One pass over the image, in ring-slot pieces, every one from pinned staging memory.
        assert sum(c.nbytes for c in device.copy_log) == manifest.arena_bytes
        assert all(c.from_pinned and c.nbytes <= 64 << 10 for c in device.copy_log)
        assert device.max_in_flight <= ring.ring_slots
        assert image.files_dir is not None
        for name in manifest.files:
            assert (image.files_dir / name).read_bytes() == (version / name).read_bytes()
    finally:
        device.close()


def test_a_symlink_out_of_the_directory_below_a_subdirectory_is_refused(
    checkpoint: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    version, _ = checkpoint
    (version / "original").mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("not the model's")
    (version / "original" / "params.json").symlink_to(secret)
    message = _build_error(version, tmp_path)
    assert f"params.json is a symlink to {secret}, outside the model directory" in message


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda data: b"\xff" * 8 + data[8:], "header length"),
        (lambda data: data[:8] + b"{not json" + data[17:], "header is not JSON"),
        (lambda data: data[:4], "truncated safetensors header"),
    ],
)
def test_a_corrupt_shard_header_is_refused(
    checkpoint: tuple[Path, dict[str, np.ndarray]],
    tmp_path: Path,
    damage: Callable[[bytes], bytes],
    message: str,
) -> None:
    version, _ = checkpoint
    path = version / shard_name(9, 12)
    path.write_bytes(damage(path.read_bytes()))
    got = _build_error(version, tmp_path)
    assert shard_name(9, 12) in got and message in got
