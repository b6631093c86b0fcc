"""`thaw up --rate-limit=execution_count`: models naming one rate-limiter resource share their
replicas, so one rate limiter counts them all, as one tritonserver's does. Two Python models
each need the whole of `R` (count 1, the count given to each replica as the most one instance
asks): their executions never overlap, though each model has replicas of its own without the
flag, and the second goes beside the first even over the shared replica's budget. A model
naming a resource no other model names keeps a replica of its own."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fixtures.models import python_model
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration

_QUIET = ("--warm-pool", "0", "--preload-frameworks", "", "--no-image-build")

# Each request sleeps DELAY_S and answers when it ran: [start, end] of time.monotonic(), the
# one clock of every process on the machine.
_SPAN_PY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            start = time.monotonic()
            delay = float(pb_utils.get_input_tensor_by_name(request, "DELAY_S").as_numpy()[0])
            time.sleep(delay)
            span = np.array([start, time.monotonic()], dtype=np.float64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SPAN", span)]))
        return responses
"""


def _span_model(repo: Path, name: str, resource: str) -> None:
    config = f"""
        name: "{name}"
        backend: "python"
        input [ {{ name: "DELAY_S" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        output [ {{ name: "SPAN" data_type: TYPE_FP64 dims: [ 2 ] }} ]
        instance_group [ {{ count: 1 kind: KIND_CPU
          rate_limiter {{ resources [ {{ name: "{resource}" count: 1 }} ] }} }} ]
    """
    python_model(repo, name, textwrap.dedent(config), _SPAN_PY)


def _delay(delay_s: float) -> list[httpclient.InferInput]:
    delay = httpclient.InferInput("DELAY_S", [1], "FP32")
    delay.set_data_from_numpy(np.array([delay_s], dtype=np.float32))
    return [delay]


def test_models_naming_one_resource_run_one_at_a_time_in_one_replica(tmp_path: Path) -> None:
    _span_model(tmp_path, "first", "R")
    _span_model(tmp_path, "second", "R")
    _span_model(tmp_path, "alone", "own")
    # A shared replica's budget below one model's footprint: the second model has no room
    # beside the first (busy, within its eviction grace) and goes there over the budget.
    budget = ("--shared-replica-bytes", str(1 << 20), "--shared-model-overhead-bytes",
              str(1 << 20), "--evict-grace-s", "600")  # fmt: skip
    server = UpProcess(tmp_path, *_QUIET, *budget, "--rate-limit=execution_count")
    try:
        with httpclient.InferenceServerClient(server.hostport, concurrency=2) as client:
            for model in ("first", "second", "alone"):  # awake: no cold start in the spans
                client.infer(model, _delay(0.0))
            # Both at once (the client's two connections), each for 0.6 s.
            calls = {m: client.async_infer(m, _delay(0.6)) for m in ("first", "second")}
            spans = {m: call.get_result().as_numpy("SPAN") for m, call in calls.items()}
        (a_start, a_end), (b_start, b_end) = spans["first"], spans["second"]
        assert a_end <= b_start or b_end <= a_start, f"overlapping executions: {spans}"
        shared = server.get("/thaw/status")["shared"]["replicas"]
        assert [sorted(r["models"]) for r in shared] == [["first", "second"]]
        log = server.log_path.read_text(errors="replace")
        assert "model=first shares replicas with the models naming its rate-limiter" in log
        assert "model=alone shares" not in log
        assert "over its budget, beside the models naming its rate-limiter resources" in log
    finally:
        server.stop()
