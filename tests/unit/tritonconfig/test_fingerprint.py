"""A model directory's fingerprint changes with its files, and not with what serving it writes
(a Python model's `__pycache__`) or hidden directories."""

from __future__ import annotations

import os
from pathlib import Path

from tritonconfig.fingerprint import fingerprint


def _model(root: Path) -> Path:
    (root / "m" / "1").mkdir(parents=True)
    (root / "m" / "1" / "model.py").write_text("x = 1\n")
    (root / "m" / "config.pbtxt").write_text('backend: "python"\n')
    return root / "m"


def test_a_new_version_or_an_edited_file_changes_it(tmp_path: Path) -> None:
    model = _model(tmp_path)
    before = fingerprint(model)
    assert sorted(row[0] for row in before) == ["1/model.py", "config.pbtxt"]
    (model / "2").mkdir()
    (model / "2" / "model.py").write_text("x = 2\n")
    assert fingerprint(model) != before
    (model / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: 8\n')
    os.utime(model / "config.pbtxt", ns=(1, 1))
    assert ("config.pbtxt", 1, 36) in fingerprint(model)


def test_bytecode_and_hidden_directories_are_no_change(tmp_path: Path) -> None:
    model = _model(tmp_path)
    before = fingerprint(model)
    (model / "1" / "__pycache__").mkdir()
    (model / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0" * 10)
    (model / ".git").mkdir()
    (model / ".git" / "HEAD").write_text("ref\n")
    assert fingerprint(model) == before


def test_a_missing_directory_has_no_files(tmp_path: Path) -> None:
    assert fingerprint(tmp_path / "absent") == ()
