"""Untrusted manifests: anything malformed, lying or path-like is refused with a clear error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from snapshotter import ImageLoader, ImageNotFound, ManifestError
from snapshotter.content_address import chunk_path
from snapshotter.image_builder import plan_layout
from snapshotter.image_ref import ImageRef
from snapshotter.manifest import ChunkEntry, Manifest, TensorEntry
from snapshotter.stores.dir_store import DirStore

DIGEST = "a" * 64


def good_doc() -> dict[str, Any]:
    manifest = Manifest(
        model="m",
        version="1",
        target="cpu",
        source_digest="b" * 64,
        framework="onnx",
        framework_versions={"onnx": "1.0"},
        chunks=(ChunkEntry(DIGEST, 8192),),
        tensors=(TensorEntry("w", "float32", (2, 3), 0, 4096, 24),),
        artifacts={"onnx_graph": ChunkEntry("c" * 64, 10)},
    )
    return json.loads(manifest.to_json())  # type: ignore[no-any-return]


def test_round_trip_keeps_every_field() -> None:
    doc = good_doc()
    manifest = Manifest.from_json(json.dumps(doc).encode())
    assert manifest.tensors[0].shape == (2, 3)
    assert manifest.arena_bytes == 8192 and manifest.chunk_bases == (0,)
    assert manifest.all_digests() == {DIGEST, "c" * 64}
    assert Manifest.from_json(manifest.to_json()) == manifest


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["chunks"][0].update(digest="../../etc/passwd"), "not a sha256"),
        (lambda d: d["chunks"][0].update(digest="/etc/passwd"), "not a sha256"),
        (lambda d: d["artifacts"]["onnx_graph"].update(digest="../" + "a" * 61), "not a sha256"),
        (lambda d: d["chunks"][0].update(digest="A" * 64), "not a sha256"),
        (lambda d: d.update(model="../evil"), "model name"),
        (lambda d: d.update(model="/abs"), "model name"),
        (lambda d: d.update(version="1/../../x"), "version"),
        (lambda d: d.update(target="cpu/../x"), "target"),
        (lambda d: d["tensors"][0].update(offset=8192), "outside its chunk"),
        (lambda d: d["chunks"][0].update(size=100), "outside its chunk"),
        (lambda d: d["tensors"][0].update(nbytes=4), "nbytes != shape"),
        (lambda d: d["tensors"][0].update(offset=100), "aligned"),
        (lambda d: d["tensors"][0].update(offset=-4096), "must be an integer"),
        (lambda d: d["tensors"][0].update(chunk=5), "chunk"),
        (lambda d: d["tensors"][0].update(chunk=True), "must be an integer"),
        (lambda d: d["tensors"][0].update(dtype="object"), "unknown dtype"),
        # found by tests/fuzz/test_fuzz_manifest.py: an unhashable dtype was a TypeError
        (lambda d: d["tensors"][0].update(dtype=[]), "unknown dtype"),
        (lambda d: d["tensors"][0].update(dtype={"a": 1}), "unknown dtype"),
        (lambda d: d["tensors"][0].update(shape=[2, "3"]), "must be an integer"),
        (lambda d: d["chunks"][0].update(size=1 << 60), "must be an integer in"),
        (lambda d: d["tensors"].append(dict(d["tensors"][0])), "duplicate tensor"),
        (lambda d: d.update(format_version=99), "format_version"),
        (lambda d: d.update(chunks="nope"), "must be a list"),
    ],
)
def test_hostile_manifests_are_refused(mutate: Any, message: str) -> None:
    doc = good_doc()
    mutate(doc)
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(json.dumps(doc).encode())


@pytest.mark.parametrize("data", [b"", b"{", b"[]", b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe"])
def test_garbage_is_a_manifest_error_not_a_crash(data: bytes) -> None:
    with pytest.raises(ManifestError):
        Manifest.from_json(data)


def test_chunk_paths_never_leave_the_root(tmp_path: Path) -> None:
    assert chunk_path(tmp_path, DIGEST) == tmp_path / "chunks" / "aa" / DIGEST
    for evil in ("../" * 10 + "etc/passwd", "/etc/passwd", "aa/../../x", ""):
        with pytest.raises(ManifestError):
            chunk_path(tmp_path, evil)


def test_loader_ignores_a_manifest_with_escaping_paths(tmp_path: Path) -> None:
    doc = good_doc()
    doc["chunks"][0]["digest"] = "../../../../tmp/x"
    path = tmp_path / "images" / "m" / "1" / "cpu" / "manifest.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    loader = ImageLoader(str(tmp_path), None, "cpu")
    assert loader.find("m", "1", None) is None
    with pytest.raises(ManifestError):
        loader.manifest(ImageRef("m", "1", "cpu"))
    with pytest.raises(ImageNotFound):
        DirStore(tmp_path).read_manifest(ImageRef("m", "2", "cpu"))


def test_layout_aligns_every_tensor_and_bounds_chunks() -> None:
    sizes = [10, 5000, 3, 9000, 100_000, 1]
    placements, chunk_sizes = plan_layout(sizes, max_chunk_bytes=20_000)
    assert all(p.offset % 4096 == 0 for p in placements)
    for size, place in zip(sizes, placements, strict=True):
        assert place.offset + size <= chunk_sizes[place.chunk]
    assert placements[4].offset == 0  # the big tensor got a chunk of its own
    assert all(s <= 20_000 for i, s in enumerate(chunk_sizes) if i != placements[4].chunk)


def test_a_manifest_claiming_absurd_sizes_fails_cleanly(tmp_path: Path) -> None:
    from snapshotter import SnapshotError

    doc = good_doc()
    doc["chunks"] = [{"digest": f"{i:064x}", "size": 1 << 40} for i in range(1000)]
    doc["tensors"] = []
    doc["artifacts"] = {}
    path = tmp_path / "images" / "m" / "1" / "cpu" / "manifest.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    loader = ImageLoader(str(tmp_path), None, "cpu")
    with pytest.raises(SnapshotError):  # 1000 TiB: refused, not a crash or a hang
        loader.restore(ImageRef("m", "1", "cpu"))
