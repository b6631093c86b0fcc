"""`pb_utils.load_model(name, config, files)` from a Python model, in a stub process as in the
server's own: the override files reach the load (Triton's bls_model_loading loads a model from
bytes it read itself). A stub process refused any `files` before."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from runtime.config import ModelControlMode, ServeConfig
from runtime.inference import InferRequest, InferTensor
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from tests.fixtures.models import write_config

# The model the loader sends as bytes: answers 7.0.
SEVEN = b"""
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = pb_utils.Tensor("OUT", np.array([7.0], dtype=np.float32))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""

LOADER = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

SEVEN = %r
CONFIG = json.dumps({
    "backend": "python",
    "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
    "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
})

class TritonPythonModel:
    def execute(self, requests):
        try:
            pb_utils.load_model("seven", CONFIG, {"file:1/model.py": SEVEN})
            ready = pb_utils.is_model_ready("seven", "1")
        except pb_utils.TritonModelException as exc:
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(exc.message()))
                    for _ in requests]
        out = pb_utils.Tensor("OUT", np.array([float(ready)], dtype=np.float32))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""
CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
parameters { key: "thaw.python_runtime" value { string_value: "%s" } }
"""


@pytest.fixture(params=["process", "in_process"])
async def manager(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[ModelManager]:
    (tmp_path / "loader" / "1").mkdir(parents=True)
    write_config(tmp_path / "loader", CONFIG % request.param)
    (tmp_path / "loader" / "1" / "model.py").write_text(textwrap.dedent(LOADER % SEVEN))
    config = ServeConfig(
        repository=tmp_path, model_control_mode=ModelControlMode.EXPLICIT, load_models=("loader",)
    )
    mgr = ModelManager(config, metrics=Metrics())
    await mgr.start()
    yield mgr
    await mgr.stop()


def _request(model: str) -> InferRequest:
    data = np.array([1.0], dtype=np.float32)
    return InferRequest(model, "", [InferTensor("IN", "FP32", data.shape, data)])


async def test_a_model_loads_another_from_the_bytes_it_passes(manager: ModelManager) -> None:
    response = await asyncio.wait_for(manager.infer(_request("loader")), timeout=60)
    assert response.outputs[0].data.tolist() == [1.0]  # "seven" was ready at once
    seven = await asyncio.wait_for(manager.infer(_request("seven")), timeout=60)
    assert seven.outputs[0].data.tolist() == [7.0]
