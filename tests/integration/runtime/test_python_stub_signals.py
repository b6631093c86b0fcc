"""Ctrl-C in the terminal of `thaw serve` reaches its whole process group, stubs included: the
server stops its models in order, each model's `finalize()` runs in its stub, and no stub dies
of the signal first (as Triton's stubs, which skip SIGINT and SIGTERM: their server ends them).
Before, every stub printed a KeyboardInterrupt traceback and `finalize()` never ran.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import requests

from tests.fixtures.models import python_model
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

_CONFIG = """
name: "NAME"
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""
_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.instance = args["model_instance_name"]

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]

    def finalize(self):
        with open(FINALIZED, "a") as log:
            log.write(self.instance + "\\n")
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_whole_group_stops_the_models_in_order(
    tmp_path: Path, signum: signal.Signals
) -> None:
    finalized = tmp_path / "finalized"
    source = _MODEL.replace("FINALIZED", repr(str(finalized)))
    python_model(tmp_path / "repo", "m", _CONFIG.replace("NAME", "m"), source)
    server = ServeProcess(tmp_path / "repo", new_session=True)
    try:
        server.wait_ready()
        body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [2], "data": [1, 2]}]}
        answer = requests.post(f"{server.url}/v2/models/m/infer", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        os.killpg(server.proc.pid, signum)  # the server and every stub, as a terminal does
        assert server.proc.wait(60) == 0, server.logs()
    finally:
        server.stop()
    logs = server.log_path.read_text(errors="replace")
    assert sorted(finalized.read_text().split()) == ["m_0_0", "m_0_1"], logs
    assert "Traceback" not in logs and "KeyboardInterrupt" not in logs, logs
    assert "restarting it" not in logs, logs
