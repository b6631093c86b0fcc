"""Compiled artifacts in an image: archives that unpack only inside their root, keys that say why
an artifact does not fit this host, and a manifest format that old images still satisfy."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import tarfile
from pathlib import Path

import numpy as np
import pytest

from snapshotter import (
    Arena,
    ArtifactError,
    BuildError,
    ManifestError,
    RestoredImage,
    build_image,
)
from snapshotter.artifact_archive import pack_dir, unpack_archive
from snapshotter.artifact_key import key_mismatch, settings_digest
from snapshotter.manifest import ChunkEntry, Manifest
from snapshotter.stores.dir_store import DirStore
from tests.fixtures.torch_models import make_torch_export_linear, make_torchscript_linear

DIGEST = "ab" * 32


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _tar(*members: tarfile.TarInfo, data: bytes = b"x") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info in members:
            if info.isfile():
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return buffer.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def test_pack_is_deterministic_and_unpacks_to_the_same_tree(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "ab" / "locks").mkdir(parents=True)
    (src / "ab" / "kernel.so").write_bytes(b"\x7fELF...")
    (src / "fxgraph").mkdir()
    (src / "fxgraph" / "entry").write_bytes(b"graph")
    (src / "locks").mkdir()
    (src / "locks" / "k.lock").write_bytes(b"")
    first = pack_dir(src, skip=frozenset({"locks"}))
    (src / "ab" / "kernel.so").touch()  # a newer mtime changes nothing
    assert pack_dir(src, skip=frozenset({"locks"})) == first

    digest = hashlib.sha256(first).hexdigest()
    out = unpack_archive(first, tmp_path / "unpacked", digest)
    assert out == tmp_path / "unpacked" / digest
    assert _tree(out) == {"ab/kernel.so": b"\x7fELF...", "fxgraph/entry": b"graph"}
    # A second unpack (another process, a later load) reuses the directory.
    assert unpack_archive(first, tmp_path / "unpacked", digest) == out
    assert [p.name for p in (tmp_path / "unpacked").iterdir()] == [digest]


@pytest.mark.parametrize(
    "member",
    [
        _member("../escape"),
        _member("/abs/escape"),
        _member("a/../../escape"),
        _member("link", tarfile.SYMTYPE, "/etc/passwd"),
        _member("hard", tarfile.LNKTYPE, "../../escape"),
        _member("dev", tarfile.CHRTYPE),
        _member("fifo", tarfile.FIFOTYPE),
        _member("back\\slash"),
    ],
    ids=["dotdot", "absolute", "nested-dotdot", "symlink", "hardlink", "device", "fifo", "bs"],
)
def test_hostile_archives_are_refused_and_write_nothing(
    tmp_path: Path, member: tarfile.TarInfo
) -> None:
    data = _tar(_member("fine"), member)
    root = tmp_path / "root" / "unpacked"
    with pytest.raises(ArtifactError):
        unpack_archive(data, root, hashlib.sha256(data).hexdigest())
    assert list(root.iterdir()) == []  # no half tree, no temporary left behind
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["root", "unpacked"]


def test_garbage_and_bad_digests_are_artifact_errors(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="cannot be unpacked"):
        unpack_archive(b"not a tar at all" * 64, tmp_path, DIGEST)
    with pytest.raises(ArtifactError, match="digest"):
        unpack_archive(_tar(_member("fine")), tmp_path, "../../etc")


def test_key_mismatch_names_the_field_that_differs() -> None:
    built = {"target": "cuda:sm_90", "torch": "2.12.0", "settings": "abc"}
    assert key_mismatch(built, dict(built)) is None
    assert key_mismatch(built, {**built, "torch": "2.13.0"}) == (
        "torch: built with 2.12.0, here 2.13.0"
    )
    assert key_mismatch(built, {**built, "host": "x86_64:1"}) == (
        "host: built with (none), here x86_64:1"
    )
    assert settings_digest({"a": 1, "b": "x"}) == settings_digest({"b": "x", "a": 1})
    assert settings_digest({"a": 1}) != settings_digest({"a": 2})


def _manifest(**kw: object) -> Manifest:
    fields: dict[str, object] = {
        "model": "m",
        "version": "1",
        "target": "cpu",
        "source_digest": DIGEST,
        "framework": "torch_export",
        "framework_versions": {"torch": "2.13.0"},
        "chunks": (),
        "tensors": (),
        "artifacts": {"torch_compile_cache": ChunkEntry("cd" * 32, 3)},
    }
    fields.update(kw)
    return Manifest(**fields)  # type: ignore[arg-type]


def test_manifest_without_keyed_artifacts_stays_version_1() -> None:
    manifest = _manifest()
    doc = json.loads(manifest.to_json())
    assert doc["format_version"] == 1 and "artifact_keys" not in doc
    assert Manifest.from_json(manifest.to_json()) == manifest


def test_manifest_with_keys_is_version_2_and_round_trips() -> None:
    keys = {"torch_compile_cache": {"target": "cpu", "torch": "2.13.0"}}
    manifest = _manifest(artifact_keys=keys)
    doc = json.loads(manifest.to_json())
    assert doc["format_version"] == 2 and doc["artifact_keys"] == keys
    assert Manifest.from_json(manifest.to_json()).artifact_keys == keys


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"nope": {"a": "b"}}, "names no artifact"),
        ({"torch_compile_cache": {}}, "must be an object of"),
        ({"torch_compile_cache": "cpu"}, "must be an object of"),
        ({"torch_compile_cache": {"torch": 2}}, "key field"),
        ([], "`artifact_keys` must be an object"),
    ],
)
def test_malformed_artifact_keys_are_refused(keys: object, message: str) -> None:
    doc = json.loads(_manifest(artifact_keys={"torch_compile_cache": {"a": "b"}}).to_json())
    doc["artifact_keys"] = keys
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(json.dumps(doc).encode())


def test_unknown_future_format_version_is_refused() -> None:
    doc = json.loads(_manifest().to_json())
    doc["format_version"] = 4
    with pytest.raises(ManifestError, match="format_version"):
        Manifest.from_json(json.dumps(doc).encode())


def _image(
    tmp_path: Path, artifacts: dict[str, bytes], keys: dict[str, dict[str, str]]
) -> RestoredImage:
    entries = {n: ChunkEntry(hashlib.sha256(d).hexdigest(), len(d)) for n, d in artifacts.items()}
    manifest = _manifest(artifacts=entries, artifact_keys=keys)
    return RestoredImage(
        manifest.ref, manifest, Arena(0), {}, artifacts, {}, unpack_root=tmp_path / "unpacked"
    )


def test_keyed_artifact_is_used_only_when_built_for_this_host(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = {"target": "cpu", "torch": "2.13.0"}
    img = _image(
        tmp_path, {"torch_compile_cache": b"abc", "unkeyed": b"x"}, {"torch_compile_cache": key}
    )
    assert img.keyed_artifact("torch_compile_cache", key) == b"abc"
    with caplog.at_level(logging.INFO, logger="snapshotter.restored_image"):
        assert img.keyed_artifact("torch_compile_cache", {**key, "torch": "2.14.0"}) is None
        assert img.keyed_artifact("ort_trt_cache", key) is None
        assert img.keyed_artifact("unkeyed", key) is None
    text = caplog.text
    assert "model=m version=1 image artifact torch_compile_cache not used" in text
    assert "torch: built with 2.13.0, here 2.14.0" in text
    assert "ort_trt_cache not used: the image has none" in text
    assert "unkeyed not used: the image records no key for it" in text


def test_unpack_lands_under_the_unpack_root(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "engine.engine").write_bytes(np.arange(10, dtype=np.uint8).tobytes())
    img = _image(tmp_path, {"ort_trt_cache": pack_dir(src)}, {"ort_trt_cache": {"t": "x"}})
    out = img.unpack("ort_trt_cache")
    assert out.parent == tmp_path / "unpacked"
    assert (out / "engine.engine").read_bytes() == bytes(range(10))


def _with_compile(model_dir: Path, value: str) -> Path:
    config = model_dir / "config.pbtxt"
    escaped = value.replace('"', '\\"')
    param = "TORCH_COMPILE_OPTIONAL_PARAMETERS"
    config.write_text(
        config.read_text()
        + f'\nparameters {{ key: "{param}" value {{ string_value: "{escaped}" }} }}\n'
    )
    return model_dir


def test_malformed_compile_parameter_fails_the_build_naming_the_config(tmp_path: Path) -> None:
    model_dir = _with_compile(make_torch_export_linear(tmp_path / "repo"), '{"mode": 3}')
    with pytest.raises(BuildError, match=r"config\.pbtxt: parameter `TORCH_COMPILE_OPTIONAL"):
        build_image(model_dir / "1", DirStore(tmp_path / "store"))


def test_torchscript_with_compile_builds_a_weights_image_and_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model_dir = _with_compile(make_torchscript_linear(tmp_path / "repo"), "{}")
    with caplog.at_level(logging.WARNING):
        manifest = build_image(model_dir / "1", DirStore(tmp_path / "store"))
    assert set(manifest.artifacts) == {"torchscript_weightless"}
    assert manifest.format_version == 1
    assert "torch.compile cannot compile a torchscript model" in caplog.text


def test_gpu_compile_cache_needs_that_gpu_to_build(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    model_dir = _with_compile(make_torch_export_linear(tmp_path / "repo"), "{}")
    with pytest.raises(BuildError, match="torch compile cache needs a CUDA device"):
        build_image(model_dir / "1", DirStore(tmp_path / "store"), target="cuda:sm_90")
