"""How a Python model's errors count in the statistics and metrics, as Triton 2.51's python
backend reports them (checked side by side): an `InferenceResponse(error=...)` the model
returns is a request it answered (success, inference counted), an execute that raises fails
its requests (failure, reason BACKEND). In a stub (the default), on `thaw serve`."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import make_execute_error
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration


def test_an_error_response_is_an_answered_request_and_a_raise_a_failure(
    start_serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    make_execute_error(tmp_path)
    server = start_serve(tmp_path)
    with httpclient.InferenceServerClient(server.hostport) as client:
        for value, refused in ((1.0, False), (5000.0, True), (-1.0, True), (2.0, False)):
            tensor = httpclient.InferInput("INPUT0", [1], "FP32")
            tensor.set_data_from_numpy(np.array([value], np.float32))
            if refused:
                with pytest.raises(InferenceServerException):
                    client.infer("execute_error", [tensor])
            else:
                client.infer("execute_error", [tensor])
        (row,) = client.get_inference_statistics("execute_error")["model_stats"]
    assert row["execution_count"] == 4
    assert row["inference_count"] == 3  # the error response's request counted
    stats = row["inference_stats"]
    assert (stats["success"]["count"], stats["fail"]["count"]) == (3, 1)
    with urllib.request.urlopen(server.metrics_url + "/metrics", timeout=10) as answer:
        metrics = answer.read().decode()
    assert 'nv_inference_request_success{model="execute_error",version="1"} 3' in metrics
    assert (
        'nv_inference_request_failure{model="execute_error",reason="BACKEND",version="1"} 1'
        in metrics
    )


_FAILING_INIT_PY = """\
class TritonPythonModel:
    def initialize(self, args):
        open("/nonexistent/thaw-init-input")

    def execute(self, requests):
        return []
"""


def test_a_failed_initialize_reads_as_tritons(
    start_serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """A Python model whose `initialize` raises: the load answer, the index reason and the log
    in Triton 2.51's words (checked side by side), with the line that raised."""
    model = make_execute_error(tmp_path, "failing_init")
    (model / "1" / "model.py").write_text(_FAILING_INIT_PY)
    server = start_serve(tmp_path, "--model-control-mode=explicit")
    why = (
        "Internal: FileNotFoundError: [Errno 2] No such file or directory: "
        "'/nonexistent/thaw-init-input'\n\nAt:\n  "
    )
    with httpclient.InferenceServerClient(server.hostport) as client:
        with pytest.raises(InferenceServerException) as refused:
            client.load_model("failing_init")
        assert (
            f"load failed for model 'failing_init': version 1 is at UNAVAILABLE state: {why}"
            in str(refused.value)
        )
        assert "model.py(3): initialize\n;\n" in str(refused.value)
        (row,) = client.get_model_repository_index()
    assert row["reason"].startswith(why) and row["reason"].endswith("(3): initialize\n")
    assert "failed to load 'failing_init' version 1: Internal: FileNotFoundError" in (
        server.log_path.read_text()
    )
