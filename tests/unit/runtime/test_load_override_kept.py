"""A load without `config` of a model serving one (the override holds while its files are
unchanged) and the words of a failed load, as tritonserver (qa/L0_lifecycle
test_config_override)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runtime.config import ModelControlMode, ServeConfig
from runtime.errors import InvalidInput, ModelNotFound, RepositoryError
from runtime.models.load_errors import name_load_failure, refused_overrides
from runtime.models.load_overrides import load_overrides
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from tests.fixtures.models import make_add_sub


def _manager(repo: Path) -> ModelManager:
    config = ServeConfig(repository=repo, model_control_mode=ModelControlMode.EXPLICIT)
    return ModelManager(config, metrics=Metrics())


_OVERRIDE = {
    "backend": "python",
    "max_batch_size": 2,
    "input": [{"name": f"INPUT{i}", "data_type": "TYPE_FP32", "dims": [4]} for i in (0, 1)],
    "output": [{"name": f"OUTPUT{i}", "data_type": "TYPE_FP32", "dims": [4]} for i in (0, 1)],
}


async def test_a_plain_load_keeps_the_override_until_a_file_changes(tmp_path: Path) -> None:
    model_dir = make_add_sub(tmp_path)
    manager = _manager(tmp_path)
    await manager.start()
    try:
        await manager.load("add_sub", config_json=json.dumps(_OVERRIDE))
        await manager.load("add_sub")
        assert manager.config("add_sub", None)["max_batch_size"] == 2
        # A touched config.pbtxt: the repository's config is read again.
        config = model_dir / "config.pbtxt"
        stat = config.stat()
        os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        await manager.load("add_sub")
        assert manager.config("add_sub", None)["max_batch_size"] == 0
    finally:
        await manager.stop()


async def test_a_failed_load_is_worded_as_triton_words_it(tmp_path: Path) -> None:
    model_dir = make_add_sub(tmp_path)
    (model_dir / "1" / "model.py").unlink()
    manager = _manager(tmp_path)
    await manager.start()
    try:
        with pytest.raises(RepositoryError, match=r"^load failed for model 'add_sub': .*model"):
            await manager.load("add_sub")
        with pytest.raises(ModelNotFound, match=r"^failed to load 'missing'"):
            await manager.load("missing")
    finally:
        await manager.stop()


def test_a_refusal_or_an_already_named_failure_keeps_its_words() -> None:
    named = RepositoryError("failed to load 'm', failed to poll from model repository")
    name_load_failure("m", named)
    assert str(named) == "failed to load 'm', failed to poll from model repository"
    failed = RepositoryError("model file m/1/model.py is missing")
    name_load_failure("m", failed)
    assert (
        failed.message
        == str(failed)
        == ("load failed for model 'm': model file m/1/model.py is missing")
    )


def test_refused_overrides_say_failed_to_load_and_the_model() -> None:
    """Triton's `failed to load '<name>', failed to poll from model repository`."""
    try:
        load_overrides(None, {"1/model.onnx": b"x"})
    except InvalidInput as exc:
        refused = refused_overrides("m", exc)
    assert refused.status == 400
    assert refused.message.startswith(
        "failed to load 'm', failed to poll from model repository: a load request with 'file:'"
    )
