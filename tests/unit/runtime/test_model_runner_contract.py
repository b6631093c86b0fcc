"""The model runner keeps Triton's contract around `initialize` and `finalize`: no BLS there
(Triton's "BLS is only supported during the 'execute' function."), and in a stub process the
model file is importable as `model` already during `initialize` (Triton's qa
bls_model_loading runs `unittest.main("model")` there)."""

from __future__ import annotations

import logging
import sys
import textwrap
from pathlib import Path

import pytest

from runtime.python import pb_utils
from runtime.python.stub.model_runner import ModelError, ModelRunner

_BLS_IN_INITIALIZE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pb_utils.InferenceRequest(model_name="other", inputs=[], requested_output_names=[]).exec()

    def execute(self, requests):
        return None
"""

_BLS_IN_FINALIZE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return None

    def finalize(self):
        pb_utils.InferenceRequest(model_name="other", inputs=[], requested_output_names=[]).exec()
"""

_IMPORTS_ITSELF = """
import sys


class TritonPythonModel:
    def initialize(self, args):
        import model

        self.same = model is sys.modules[__name__]

    def execute(self, requests):
        return None
"""


def _model(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "m" / "1" / "model.py"
    path.parent.mkdir(parents=True)
    path.write_text(textwrap.dedent(source))
    return path


def test_bls_in_initialize_fails_it_in_tritons_words(tmp_path: Path) -> None:
    runner = ModelRunner(_model(tmp_path, _BLS_IN_INITIALIZE), decoupled=False)
    with pytest.raises(ModelError, match="BLS is only supported during the 'execute' function"):
        runner.initialize({})


def test_bls_in_finalize_is_refused_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runner = ModelRunner(_model(tmp_path, _BLS_IN_FINALIZE), decoupled=False)
    runner.initialize({})
    with caplog.at_level(logging.WARNING):
        runner.finalize()
    assert pb_utils.BLS_OUTSIDE_EXECUTE in caplog.text


def test_a_stub_model_is_importable_as_model_during_initialize(tmp_path: Path) -> None:
    runner = ModelRunner(_model(tmp_path, _IMPORTS_ITSELF), decoupled=False, alias="model")
    try:
        runner.initialize({})
        assert runner.module is not None and runner.module.TritonPythonModel is not None
        assert sys.modules["model"] is runner.module
    finally:
        runner.finalize()
        sys.modules.pop("model", None)


def test_without_an_alias_the_model_is_not_importable_as_model(tmp_path: Path) -> None:
    runner = ModelRunner(_model(tmp_path, _IMPORTS_ITSELF), decoupled=False)
    with pytest.raises(ModelError, match="No module named 'model'"):
        runner.initialize({})
