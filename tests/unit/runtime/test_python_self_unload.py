"""A Python model that unloads itself from its own `execute` (vllm_backend does, when its
engine's health check fails): `pb_utils.unload_model` returns at once, as Triton's, the request
is answered, and the model is unloaded once that request is done. It waited for the unload,
which waited for that very execute."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from runtime.config import ModelControlMode, ServeConfig
from runtime.errors import ServingError
from runtime.inference import InferRequest, InferTensor
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from tests.fixtures.models import write_config

SELF_UNLOAD = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]

    def execute(self, requests):
        try:
            pb_utils.unload_model(self.name)  # "non-blocking", as vllm_backend's comment says
        except pb_utils.TritonModelException as exc:  # the server refused it
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(exc.message()))
                    for _ in requests]
        out = pb_utils.Tensor("OUT", np.array([1.0], dtype=np.float32))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""
CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
parameters { key: "thaw.python_runtime" value { string_value: "%s" } }
"""


async def _manager(tmp_path: Path, runtime: str, mode: ModelControlMode) -> ModelManager:
    (tmp_path / "quitter" / "1").mkdir(parents=True)
    write_config(tmp_path / "quitter", CONFIG % runtime)
    (tmp_path / "quitter" / "1" / "model.py").write_text(textwrap.dedent(SELF_UNLOAD))
    config = ServeConfig(repository=tmp_path, model_control_mode=mode, load_models=("quitter",))
    mgr = ModelManager(config, metrics=Metrics())
    await mgr.start()
    return mgr


@pytest.fixture(params=["process", "in_process"])
async def manager(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[ModelManager]:
    mgr = await _manager(tmp_path, request.param, ModelControlMode.EXPLICIT)
    yield mgr
    await mgr.stop()


def _request() -> InferRequest:
    data = np.array([1.0], dtype=np.float32)
    return InferRequest("quitter", "", [InferTensor("IN", "FP32", data.shape, data)])


async def test_a_model_unloading_itself_answers_and_is_then_unloaded(
    manager: ModelManager,
) -> None:
    request = _request()
    response = await asyncio.wait_for(manager.infer(request), timeout=10)
    assert response.outputs[0].data.tolist() == [1.0]
    for _ in range(200):
        if not manager.model_ready("quitter", None):
            break
        await asyncio.sleep(0.05)
    assert not manager.model_ready("quitter", None)
    with pytest.raises(ServingError):
        await manager.infer(request)


async def test_the_servers_refusal_still_reaches_the_model(tmp_path: Path) -> None:
    manager = await _manager(tmp_path, "process", ModelControlMode.NONE)
    try:
        with pytest.raises(ServingError, match="explicit model load / unload is not allowed"):
            await asyncio.wait_for(manager.infer(_request()), timeout=10)
        assert manager.model_ready("quitter", None)
    finally:
        await manager.stop()
