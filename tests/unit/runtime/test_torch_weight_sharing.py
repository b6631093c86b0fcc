"""ENABLE_WEIGHT_SHARING: a version's TorchScript instances on one device share one module,
loaded once, each other instance logging Triton's reuse line (qa/L0_libtorch_shared_weights)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.backends.base import LoadContext
from runtime.backends.torch_backend import TorchBackend
from runtime.inference import InferRequest, InferTensor
from runtime.model_config import parse_config
from tests.fixtures.torch_models import make_torchscript_linear

_SHARING = '\nparameters { key: "ENABLE_WEIGHT_SHARING" value { string_value: "%s" } }\n'


def _instances(model_dir: Path, count: int) -> list[TorchBackend]:
    config = parse_config((model_dir / "config.pbtxt").read_text(), str(model_dir))
    shared: dict[str, Any] = {}  # one per version, as the version loader gives it
    backends = []
    for index in range(count):
        backend = TorchBackend()
        backend.load(
            LoadContext(
                model_name=model_dir.name, version="1", version_dir=model_dir / "1",
                model_dir=model_dir, config=config, instance_kind="KIND_CPU", device_id=0,
                instance_name=f"{model_dir.name}_0_{index}", instance_count=count,
                shared=shared,
            )
        )  # fmt: skip
        backends.append(backend)
    return backends


def _with_sharing(model_dir: Path, value: str) -> Path:
    config = model_dir / "config.pbtxt"
    config.write_text(config.read_text() + _SHARING % value)
    return model_dir


def test_shared_instances_run_one_module_and_say_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model_dir = _with_sharing(make_torchscript_linear(tmp_path), "true")
    with caplog.at_level(logging.INFO, logger="runtime.backends.torch_backend"):
        backends = _instances(model_dir, 3)
    assert backends[0]._module is backends[1]._module is backends[2]._module
    reuse = [r.getMessage() for r in caplog.records if "Reusing TorchScript model" in r.message]
    assert reuse == [
        "model=torch_linear Reusing TorchScript model for instance 'torch_linear_0_1'",
        "model=torch_linear Reusing TorchScript model for instance 'torch_linear_0_2'",
    ]
    x = np.ones((2, 8), np.float32)
    answers = []
    for backend in backends:
        [response] = backend.execute(
            [InferRequest("m", "1", [InferTensor("INPUT__0", "FP32", x.shape, x)])]
        )
        answers.append(np.asarray(response.outputs[0].data))  # type: ignore[union-attr]
    np.testing.assert_array_equal(answers[0], answers[2])


def test_without_sharing_each_instance_loads_its_own(tmp_path: Path) -> None:
    model_dir = _with_sharing(make_torchscript_linear(tmp_path), "false")
    first, second = _instances(model_dir, 2)
    assert first._module is not second._module
