"""A load's `file:` overrides written under `thaw up`'s own directory (activator.fleet.
override_files): exactly the given files, never a byte outside, hostile paths refused in
Triton's words with nothing left written."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from activator.errors import BadRequest
from activator.fleet.override_files import OverrideFiles, _write_one


def _everything(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_the_model_directory_holds_exactly_the_given_files(tmp_path: Path) -> None:
    store = OverrideFiles(tmp_path)
    model = store.write("m", {"1/model.onnx": b"weights", "1/sub/labels.txt": b"a\nb\n"})
    assert model.name == "m"
    assert store.root is not None and store.holds(model)
    assert (model / "1" / "model.onnx").read_bytes() == b"weights"
    assert _everything(model) == ["1", "1/model.onnx", "1/sub", "1/sub/labels.txt"]
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700  # thaw up's own, private
    again = store.write("m", {"2/model.onnx": b"other"})  # each load its own directory
    assert again != model and (model / "1" / "model.onnx").exists()
    store.discard(model)
    assert not model.exists() and again.exists()
    store.close()
    assert not again.exists() and store.root is None


@pytest.mark.parametrize(
    "path",
    [
        "../../root/.bashrc",
        "../escape_symlink/new_dir/test.txt",
        "1/../../x",
        "/etc/passwd",
        "1//model.onnx",
        "1/./model.onnx",
        "",
        "1\\..\\x",
        "1/\x00x",
        "1/" + "a" * 256,
    ],
)
def test_a_hostile_path_is_refused_and_nothing_is_written(tmp_path: Path, path: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("kept")
    store = OverrideFiles(tmp_path / "up")
    (tmp_path / "up").mkdir()
    with pytest.raises(BadRequest) as refused:
        store.write("m", {"1/model.onnx": b"ok", path: b"This shouldn't exist"})
    assert refused.value.message.startswith("failed to load 'm', ")
    assert victim.read_text() == "kept"
    assert store.root is None  # every path is checked before anything is made
    assert _everything(tmp_path) == ["up", "victim.txt"]


def test_a_symlink_planted_in_the_path_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store = OverrideFiles(tmp_path)
    model = store.write("m", {"1/model.onnx": b"ok"})
    # Another writer plants a link where the next file's directory would be (the store's
    # directories are its own; this pins that a link is never written through).
    (model / "2").symlink_to(outside)
    with pytest.raises(BadRequest):
        _write_into(model, "2/evil.txt")
    assert list(outside.iterdir()) == []


def _write_into(model: Path, rel: str) -> None:
    _write_one(model, rel, b"evil", "m")  # the per-file check itself


def test_a_file_where_a_directory_is_needed_is_the_clients_400(tmp_path: Path) -> None:
    store = OverrideFiles(tmp_path)
    with pytest.raises(BadRequest) as refused:
        store.write("m", {"1/a": b"file", "1/a/b": b"under a file"})
    assert "cannot be written" in refused.value.message
    assert store.root is not None and _everything(store.root) == []


def test_a_model_name_that_is_no_name_is_refused(tmp_path: Path) -> None:
    store = OverrideFiles(tmp_path)
    with pytest.raises(BadRequest):
        store.write("..", {"1/model.onnx": b"x"})
    assert store.root is None
