"""`exec(decoupled=True)` on a default (non-decoupled) model yields its one response and ends,
as Triton's iterator (bls_memory's unittest: `next()` then StopIteration); a stub process's
iterator yielded an empty response after it."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from runtime.config import ServeConfig
from runtime.inference import InferRequest, InferTensor
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from tests.fixtures.models import write_config

IDENTITY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", r.inputs()[0].as_numpy())])
                for r in requests]
"""
# Answers how many responses its decoupled BLS call to `identity` yielded.
COUNTER = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        call = pb_utils.InferenceRequest(
            model_name="identity", inputs=[pb_utils.Tensor("IN", np.ones(1, np.float32))],
            requested_output_names=["OUT"])
        count = float(len(list(call.exec(decoupled=True))))
        out = pb_utils.Tensor("OUT", np.array([count], dtype=np.float32))
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
    for name, source in (("identity", IDENTITY), ("counter", COUNTER)):
        (tmp_path / name / "1").mkdir(parents=True)
        write_config(tmp_path / name, CONFIG % request.param)
        (tmp_path / name / "1" / "model.py").write_text(textwrap.dedent(source))
    mgr = ModelManager(ServeConfig(repository=tmp_path), metrics=Metrics())
    await mgr.start()
    yield mgr
    await mgr.stop()


async def test_a_default_models_stream_is_its_one_response(manager: ModelManager) -> None:
    data = np.array([1.0], dtype=np.float32)
    request = InferRequest("counter", "", [InferTensor("IN", "FP32", data.shape, data)])
    response = await asyncio.wait_for(manager.infer(request), timeout=60)
    assert response.outputs[0].data.tolist() == [1.0]
