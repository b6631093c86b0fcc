"""A Python model's instances load at once, as Triton loads a python / onnxruntime model's
instances in parallel (qa/L0_lifecycle test_concurrent_model_instance_load_speedup)."""

from __future__ import annotations

from pathlib import Path

from runtime.config import ModelControlMode, ServeConfig
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from tests.fixtures.models import python_model

# Each instance's initialize signs in, then waits (10 s at most) until both have: one
# instance loaded after the other would never see the second and fail the load.
_RENDEZVOUS_PY = """
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        log = os.path.join(os.path.dirname(os.path.dirname(__file__)), "signed_in")
        with open(log, "a") as f:
            f.write(args["model_instance_name"] + "\\n")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(log) as f:
                if len(f.read().split()) >= 2:
                    return
            time.sleep(0.05)
        raise RuntimeError("the other instance never began to load")

    def execute(self, requests):
        responses = []
        for r in requests:
            data = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""

_CONFIG = """
name: "rendezvous"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
"""


async def test_two_python_instances_load_at_the_same_time(tmp_path: Path) -> None:
    model_dir = python_model(tmp_path, "rendezvous", _CONFIG, _RENDEZVOUS_PY)
    config = ServeConfig(repository=tmp_path, model_control_mode=ModelControlMode.EXPLICIT)
    manager = ModelManager(config, metrics=Metrics())
    await manager.start()
    try:
        await manager.load("rendezvous")
        assert manager.model_ready("rendezvous", "1")
        assert len((model_dir / "signed_in").read_text().split()) == 2
    finally:
        await manager.stop()
