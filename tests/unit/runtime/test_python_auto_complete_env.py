"""A Python model's `auto_complete_config` runs where its stubs would: under the interpreter of
its `EXECUTION_ENV_PATH` (a directory or a conda-pack style tarball), which holds the model's
own packages and none of Thaw's; an environment that is missing or cannot run it fails that
model's load with an error naming the model and the path."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from runtime.errors import RepositoryError
from runtime.python.backend import auto_complete_config
from tests.fixtures.python_env import python_env
from tritonconfig import parse_config
from tritonconfig.schema import mc

# Importable only under the model's environment: the server's interpreter has no such module.
_ENV_ONLY = {"thaw_env_only_sizes": "MAX_BATCH_SIZE = 6\n"}
_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        import pathlib
        import sys
        import thaw_env_only_sizes

        # Where the hook ran: the interpreter's environment, for the test to read.
        (pathlib.Path(__file__).parent / "prefix.txt").write_text(sys.prefix)
        config.set_max_batch_size(thaw_env_only_sizes.MAX_BATCH_SIZE)
        return config
"""


def _model(tmp_path: Path, env_path: str) -> tuple[Path, Path]:
    """A model directory `m` with version 1's model.py; returns it and the model file."""
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True)
    model_file = model_dir / "1" / "model.py"
    model_file.write_text(_MODEL)
    text = (
        'name: "m"\nbackend: "python"\nparameters { key: "EXECUTION_ENV_PATH" '
        f'value {{ string_value: "{env_path}" }} }}\n'
    )
    (model_dir / "config.pbtxt").write_text(text)
    return model_dir, model_file


def _complete(model_dir: Path, model_file: Path) -> mc.ModelConfig:
    config = parse_config((model_dir / "config.pbtxt").read_text(), "m")
    return auto_complete_config(config, model_file, model_dir=model_dir)


def test_the_hook_imports_what_only_the_models_environment_holds(tmp_path: Path) -> None:
    model_dir, model_file = _model(tmp_path, "$$TRITON_MODEL_DIRECTORY/pyenv")
    env = python_env(model_dir / "pyenv", _ENV_ONLY)
    assert _complete(model_dir, model_file).max_batch_size == 6  # the environment's module
    # The hook ran under the environment's interpreter (its sys.prefix), not the server's.
    assert Path((model_file.parent / "prefix.txt").read_text()) == env


def test_a_tarball_environment_is_unpacked_for_the_hook_and_removed(tmp_path: Path) -> None:
    env = python_env(tmp_path / "built", _ENV_ONLY, copies=True)
    model_dir, model_file = _model(tmp_path, "$$TRITON_MODEL_DIRECTORY/pyenv.tar")
    with tarfile.open(model_dir / "pyenv.tar", "w", dereference=True) as archive:
        archive.add(env, arcname=".")
    assert _complete(model_dir, model_file).max_batch_size == 6
    unpacked = Path((model_file.parent / "prefix.txt").read_text())
    assert unpacked.name.startswith("thaw-env-")  # where stub_python unpacks a tarball
    assert not unpacked.exists()  # removed once the hook answered


def test_a_missing_environment_names_the_model_and_the_path(tmp_path: Path) -> None:
    model_dir, model_file = _model(tmp_path, "$$TRITON_MODEL_DIRECTORY/nowhere")
    with pytest.raises(RepositoryError) as info:
        _complete(model_dir, model_file)
    message = info.value.message
    assert message.startswith("model 'm': auto_complete_config: EXECUTION_ENV_PATH")
    assert str(model_dir / "nowhere") in message and "holds no bin/python" in message


def test_an_environment_that_cannot_run_the_hook_names_its_interpreter(tmp_path: Path) -> None:
    model_dir, model_file = _model(tmp_path, "$$TRITON_MODEL_DIRECTORY/pyenv")
    env = python_env(model_dir / "pyenv")
    for numpy in (env / "lib").glob("python*/site-packages/numpy"):
        numpy.unlink()  # a broken environment: no numpy, which every stub needs
    with pytest.raises(RepositoryError) as info:
        _complete(model_dir, model_file)
    message = info.value.message
    assert message.startswith("model 'm': importing model.py for its auto_complete_config under")
    assert str(env) in message and "No module named 'numpy'" in message
