"""The persistent source-digest index: used across processes, never for a changed file."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest

from snapshotter import ImageLoader, source_digest
from snapshotter import digest_index as di
from snapshotter.digest_index import INDEX_NAME, DigestIndex

# The package re-exports the function under the module's name; this is the module.
sd = importlib.import_module("snapshotter.source_digest")


@pytest.fixture
def model_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(di, "_RACY_S", 0.0)  # files written just now count as settled
    root = tmp_path / "m" / "1"
    root.mkdir(parents=True)
    (root / "model.onnx").write_bytes(b"weights" * 1000)
    (root / "extra.bin").write_bytes(b"more")
    return root


def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Forget the per-process memo and record every file that gets hashed from now on."""
    monkeypatch.setattr(sd, "_memo", {})
    hashed: list[Path] = []
    real = sd._hash_file

    def spy(path: Path) -> str:
        hashed.append(path)
        return real(path)

    monkeypatch.setattr(sd, "_hash_file", spy)
    return hashed


def test_a_fresh_process_reuses_the_index(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "cache" / INDEX_NAME
    first = source_digest(model_dir, index=DigestIndex(index))
    assert index.is_file() and oct(index.stat().st_mode & 0o777) == "0o644"
    hashed = _fresh_process(monkeypatch)
    assert source_digest(model_dir, index=DigestIndex(index)) == first
    assert hashed == []
    assert source_digest(model_dir) == first  # same value without any index


def test_a_changed_file_is_hashed_again(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / INDEX_NAME
    first = source_digest(model_dir, index=DigestIndex(index))
    st = (model_dir / "model.onnx").stat()
    # Same size and mtime as before, other content: ctime (and the inode here) still differ.
    replacement = model_dir / "model.tmp"
    replacement.write_bytes(b"WEIGHTS" * 1000)
    os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(replacement, model_dir / "model.onnx")
    hashed = _fresh_process(monkeypatch)
    second = source_digest(model_dir, index=DigestIndex(index))
    assert second != first
    assert hashed == [model_dir / "model.onnx"]


def test_files_changed_just_before_hashing_are_not_recorded(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(di, "_RACY_S", 3600.0)
    index = tmp_path / INDEX_NAME
    source_digest(model_dir, index=DigestIndex(index))
    assert not index.exists()  # a write in the same timestamp tick could go unnoticed


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"[]",
        b'{"format": "other"}',
        b'{"format": "thaw-source-digests-v1", "files": {"x": [1]}}',
    ],
)
def test_an_unreadable_index_counts_as_empty(
    model_dir: Path, tmp_path: Path, content: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / INDEX_NAME
    index.write_bytes(content)
    expected = source_digest(model_dir)
    hashed = _fresh_process(monkeypatch)
    assert source_digest(model_dir, index=DigestIndex(index)) == expected
    assert len(hashed) == 2
    assert len(json.loads(index.read_bytes())["files"]) == 2  # rewritten whole


def test_the_image_loader_keeps_its_index_in_the_cache(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loader = ImageLoader(None, tmp_path / "cache", "cpu")
    first = loader.source_digest(model_dir)
    assert (tmp_path / "cache" / INDEX_NAME).is_file()
    hashed = _fresh_process(monkeypatch)
    assert ImageLoader(None, tmp_path / "cache", "cpu").source_digest(model_dir) == first
    assert hashed == []
