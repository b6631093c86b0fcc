"""What Triton's qa/L0_warmup reads in the server's log of a real `thaw serve --log-verbose=1`:
each warm-up iteration's line, and a failing sample's error, in Triton's words."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures import models
from tests.fixtures.models import python_model
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

_FAILING_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[],
                                           error=pb_utils.TritonError("An Error Occurred"))
                for _ in requests]
"""

_SAMPLE = (
    'model_warmup [ {{ name: "{name}" batch_size: 1 count: {count} inputs {{ key: "INPUT0" '
    "value: {{ data_type: TYPE_FP32 dims: [ 4 ] zero_data: true }} }} }} ]"
)


def test_each_warmup_iteration_and_a_failing_sample_are_logged(tmp_path: Path) -> None:
    models.make_lazy_init(
        tmp_path, "warmed", lazy_s=0.0, warmup=_SAMPLE.format(name="regular sample", count=2)
    )
    python_model(
        tmp_path, "failing",
        'name: "failing"\nbackend: "python"\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        + _SAMPLE.format(name="zero sample", count=1),
        _FAILING_PY,
    )  # fmt: skip
    server = ServeProcess(
        tmp_path, "--model-control-mode=explicit", "--load-model=warmed", "--log-verbose=1"
    )
    try:
        server.wait_ready()
        client = httpclient.InferenceServerClient(server.hostport)
        with pytest.raises(InferenceServerException) as refused:
            client.load_model("failing")
        assert "failed to run warmup sample 'zero sample': An Error Occurred;" in str(refused.value)
        tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.zeros([1, 4], np.float32))
        assert client.infer("warmed", [tensor]).as_numpy("OUTPUT0") is not None
    finally:
        server.stop()
    log = server.log_path.read_text(errors="replace")
    for iteration in (1, 2):
        line = f"is running warmup sample 'regular sample' for iteration {iteration}"
        assert line in log
    assert "failed to run warmup sample 'zero sample': An Error Occurred;" in log
