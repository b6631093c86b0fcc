"""Triton's Python-based backends: `backend: "NAME"` runs `<backend directory>/NAME/model.py`
as a Python model (how Triton runs vllm_backend); without one, NAME is refused as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.errors import RepositoryError
from runtime.models.repository import read_model
from tritonconfig.python_based import python_based_model_file


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    backends, repo = tmp_path / "backends", tmp_path / "models"
    (backends / "echo_py").mkdir(parents=True)
    (backends / "echo_py" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text(
        'backend: "echo_py"\n'
        'input [ { name: "IN" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
    )
    return backends, repo


def test_a_backend_with_a_model_py_in_the_backend_directory_is_python_based(
    tmp_path: Path,
) -> None:
    backends, repo = _layout(tmp_path)
    spec = read_model(repo, "m", backend_directory=backends, auto_complete=False)
    assert spec.config.backend == "python"
    # Every version runs the backend's shared model.py; the version folder holds none.
    assert spec.model_file(1) == backends / "echo_py" / "model.py"
    assert spec.version_dir(1) == repo / "m" / "1"


def test_without_the_backend_directory_the_backend_is_unsupported(tmp_path: Path) -> None:
    backends, repo = _layout(tmp_path)
    with pytest.raises(RepositoryError, match="unsupported backend 'echo_py'"):
        read_model(repo, "m", auto_complete=False)
    (backends / "echo_py" / "model.py").unlink()
    with pytest.raises(RepositoryError, match="unsupported backend 'echo_py'"):
        read_model(repo, "m", backend_directory=backends, auto_complete=False)


def test_builtin_backends_and_non_names_are_never_looked_up(tmp_path: Path) -> None:
    (tmp_path / "onnxruntime").mkdir()
    (tmp_path / "onnxruntime" / "model.py").write_text("")
    (tmp_path / "model.py").write_text("")
    assert python_based_model_file("onnxruntime", tmp_path) is None
    assert python_based_model_file(".", tmp_path) is None
    assert python_based_model_file("", tmp_path) is None
    assert python_based_model_file("a/b", tmp_path) is None
    assert python_based_model_file("nul\0byte", tmp_path) is None  # never reaches the disk
    assert python_based_model_file("echo_py", None) is None
