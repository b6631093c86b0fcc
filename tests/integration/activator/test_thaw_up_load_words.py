"""A repository load call through `thaw up` (explicit mode) whose replica refused the model's
load answers the replica's words, as tritonserver answers the load: 400 / INVALID_ARGUMENT
`load failed for model 'm': version 1 is at UNAVAILABLE state: Internal: ...` (it was 503
`model 'm' could not be activated: model 'm' failed to load: ...`). A request held by the same
failed wake still reads 503, the wake's failure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import make_execute_error
from tests.fixtures.up_process import UpProcess, light_args

pytestmark = pytest.mark.integration

_FAILING_INIT_PY = """\
class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("no weights here")

    def execute(self, requests):
        return []
"""

_WORDS = (
    "load failed for model 'failing_init': version 1 is at UNAVAILABLE state: Internal: "
    "ValueError: no weights here"
)


def test_a_refused_load_answers_the_replicas_words(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    model = make_execute_error(repo, "failing_init")
    (model / "1" / "model.py").write_text(_FAILING_INIT_PY)
    up = UpProcess(repo, *light_args(repo), "--model-control-mode=explicit")
    try:
        with httpclient.InferenceServerClient(up.hostport) as client:
            with pytest.raises(InferenceServerException) as http_refused:
                client.load_model("failing_init")
            assert http_refused.value.status() == "400"
            assert http_refused.value.message().startswith(_WORDS)
            tensor = httpclient.InferInput("INPUT0", [1], "FP32")
            tensor.set_data_from_numpy(np.array([1.0], np.float32))
            with pytest.raises(InferenceServerException) as held:
                client.infer("failing_init", [tensor])
            assert held.value.status() == "503"
        grpc = grpcclient.InferenceServerClient(up.grpc_address)
        with pytest.raises(InferenceServerException) as grpc_refused:
            grpc.load_model("failing_init")
        assert grpc_refused.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert grpc_refused.value.message().startswith(_WORDS)
    finally:
        up.stop()
