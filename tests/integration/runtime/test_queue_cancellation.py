"""A request whose gRPC client went away (a cancel, or its deadline) while it waited in the
queue never reaches the model: it counts as a CANCELED failure and the model's next request
runs as if it had never been sent, as in Triton's dynamic batcher (qa/L0_request_cancellation).
tritonclient (gRPC) is the client; `thaw serve`, and `thaw up` with the model at zero (the
first request wakes it), are real processes; the model runs in its stub process.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from tests.fixtures import models
from tests.fixtures.serve_process import ServeProcess
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration

_WITHIN_S = 60.0

# Each execution appends the values it was given to `ran` (beside its version folder) and then
# waits until the file `go` exists there: the test decides when a running request ends.
_GATED = """
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.home = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def execute(self, requests):
        values = [int(pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()[0, 0])
                  for r in requests]
        with open(os.path.join(self.home, "ran"), "a") as f:
            f.write(" ".join(map(str, values)) + "\\n")
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(self.home, "go")) and time.monotonic() < deadline:
            time.sleep(0.01)
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""

_CONFIG = """
    backend: "python"
    max_batch_size: 4
    input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
    instance_group [ { count: 1 kind: KIND_CPU } ]
    dynamic_batching { }
"""


@dataclass(frozen=True)
class _Target:
    """A server under test: `thaw serve`, or `thaw up` with the model at zero."""

    repo: Path
    grpc_address: str
    metrics: Callable[[], str]  # its /metrics page
    log: Callable[[], str]  # its whole log so far


@pytest.fixture(scope="module", params=["serve", "up"])
def target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[_Target]:
    repo: Path = tmp_path_factory.mktemp(f"queue_cancel_{request.param}")
    models.python_model(repo, "gated", _CONFIG, _GATED)
    if request.param == "serve":
        serve = ServeProcess(repo, "--log-verbose", "1")
        try:
            serve.wait_ready()
            yield _Target(repo, serve.grpc_address, lambda: _get(f"{serve.url}/metrics"),
                          serve.logs)  # fmt: skip
        finally:
            serve.stop()
        return
    up = UpProcess(repo, "--warm-pool", "1", "--preload-frameworks", "", "--no-image-build",
                   "--log-verbose", "1")  # fmt: skip
    try:
        yield _Target(repo, up.grpc_address, up.metrics,
                      lambda: up.log_path.read_text(errors="replace"))  # fmt: skip
    finally:
        up.stop()


def _get(url: str) -> str:
    return requests.get(url, timeout=30).text


def _inputs(value: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.full((1, 1), value, np.int32))
    return [tensor]


def _until(what: str, predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + _WITHIN_S
    while not predicate():
        assert time.monotonic() < deadline, f"not within {_WITHIN_S:g} s: {what}"
        time.sleep(0.01)


def _metric(target: _Target, family: str, *labels: str) -> int:
    for line in target.metrics().splitlines():
        if line.startswith(family + "{") and all(x in line for x in labels):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def _ran(repo: Path) -> list[list[int]]:
    path = repo / "gated" / "ran"
    lines = path.read_text().splitlines() if path.exists() else []
    return [[int(v) for v in line.split()] for line in lines]


@pytest.mark.parametrize("how", ["cancel", "deadline"])
def test_a_request_its_client_left_while_queued_never_reaches_the_model(
    target: _Target, how: str
) -> None:
    repo = target.repo
    (repo / "gated" / "go").unlink(missing_ok=True)
    (repo / "gated" / "ran").unlink(missing_ok=True)
    client = grpcclient.InferenceServerClient(target.grpc_address)
    canceled = _metric(target, "nv_inference_request_failure", 'model="gated"', "CANCELED")
    notices = target.log().count("Cancellation notification received for")
    answers: dict[int, Any] = {}

    def answered(value: int) -> Callable[[Any, Any], None]:
        return lambda result, error: answers.__setitem__(value, (result, error))

    client.async_infer("gated", _inputs(1), answered(1))
    _until("request 1 runs in the model", lambda: _ran(repo) == [[1]])
    timeout = {"client_timeout": 2.0} if how == "deadline" else {}
    queued = client.async_infer("gated", _inputs(2), answered(2), **timeout)
    _until("request 2 waits", lambda: _metric(target, "nv_inference_pending_request_count",
                                              'model="gated"') == 1)  # fmt: skip
    if how == "cancel":
        queued.cancel()
    _until("request 2's client gives up", lambda: 2 in answers)
    result, error = answers[2]
    expected = "StatusCode.CANCELLED" if how == "cancel" else "StatusCode.DEADLINE_EXCEEDED"
    assert result is None and error.status() == expected
    _until(
        "the server sees it",
        lambda: target.log().count("Cancellation notification received for") > notices,
    )

    (repo / "gated" / "go").touch()  # request 1 ends; request 2 would be next
    _until("request 1's answer", lambda: 1 in answers)
    assert answers[1][1] is None
    after = client.infer("gated", _inputs(3))
    assert after.as_numpy("OUTPUT0").tolist() == [[3]]
    assert _ran(repo) == [[1], [3]]  # 2 never reached the model
    assert _metric(target, "nv_inference_request_failure", 'model="gated"', "CANCELED") == (
        canceled + 1
    )
    assert _metric(target, "nv_inference_pending_request_count", 'model="gated"') == 0
    client.close()
