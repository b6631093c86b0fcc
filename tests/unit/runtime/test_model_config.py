"""The runtime's config path: `read_model` completes configs with `tritonconfig` (the rules are
tested in tests/unit/tritonconfig) and every config error is a `RepositoryError` (400) that
keeps tritonconfig's message."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import tritonconfig
from runtime.errors import RepositoryError
from runtime.model_config import config_from_json, parse_config, select_versions, validate_config
from runtime.models.repository import read_model
from tests.fixtures.models import write_config
from tests.fixtures.onnx_models import make_onnx_add, make_onnx_identity
from tritonconfig.schema import mc


def _message(call: Callable[..., object], *args: object) -> str:
    with pytest.raises(tritonconfig.ModelConfigError) as info:
        call(*args)
    return info.value.message


@pytest.mark.parametrize(
    ("runtime_call", "shared_call", "args"),
    [
        (parse_config, tritonconfig.parse_config, ('name: "m"\nbogus: 1\n', "r/m/config.pbtxt")),
        (config_from_json, tritonconfig.config_from_json, ("{not json", "config override")),
        (select_versions, tritonconfig.select_versions, (mc.ModelVersionPolicy(), [], "r/m")),
        (
            validate_config,
            tritonconfig.validate_config,
            (mc.ModelConfig(max_batch_size=-1), "r/m/config.pbtxt"),
        ),
    ],
)
def test_config_errors_are_repository_errors_with_the_same_message(
    runtime_call: Callable[..., object],
    shared_call: Callable[..., object],
    args: tuple[object, ...],
) -> None:
    expected = _message(shared_call, *args)
    with pytest.raises(RepositoryError) as info:
        runtime_call(*args)
    assert info.value.message == expected
    assert info.value.status == 400
    assert isinstance(info.value.__cause__, tritonconfig.ModelConfigError)


def test_a_missing_model_file_is_refused_by_the_runtime(tmp_path: Path) -> None:
    model_dir = make_onnx_identity(tmp_path, "gone")
    (model_dir / "1" / "model.onnx").unlink()
    with pytest.raises(RepositoryError, match=r"model file .*model\.onnx is missing"):
        read_model(tmp_path, "gone")


def test_onnx_without_config_is_autocompleted_like_triton(tmp_path: Path) -> None:
    make_onnx_identity(tmp_path, "auto", with_config=False)
    spec = read_model(tmp_path, "auto")
    config = spec.config
    assert config.backend == "onnxruntime" and config.platform == "onnxruntime_onnx"
    # Batchable graph: default-max-batch-size 4, batch dim stripped, dynamic batcher on.
    assert config.max_batch_size == 4
    assert list(config.input[0].dims) == [-1]
    assert config.input[0].name == "INPUT0"
    assert config.HasField("dynamic_batching")


def test_onnx_autocomplete_fills_only_missing_outputs(tmp_path: Path) -> None:
    model_dir = make_onnx_add(tmp_path, "partial")
    write_config(
        model_dir,
        """
        backend: "onnxruntime"
        max_batch_size: 2
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
        """,
    )
    config = read_model(tmp_path, "partial").config
    assert config.max_batch_size == 2
    assert [(o.name, list(o.dims)) for o in config.output] == [("OUTPUT0", [4])]


def test_truncated_onnx_file_is_a_precise_error(tmp_path: Path) -> None:
    model_dir = make_onnx_identity(tmp_path, "trunc", with_config=False)
    path = model_dir / "1" / "model.onnx"
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(RepositoryError, match=r"cannot read ONNX model model\.onnx"):
        read_model(tmp_path, "trunc")
