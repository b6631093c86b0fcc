"""An ensemble with a decoupled step, streamed over gRPC: each of that step's responses goes on
through the steps after it and out as a response of the ensemble, as in Triton (qa/L0_decoupled's
simple_repeat / fan_repeat / repeat_square ensembles). On `thaw serve`, and through `thaw up` with
every model at zero (the ensemble's replica streams its decoupled step through the gRPC front
door)."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.fixtures.models import make_ensemble, make_python_identity, write_config
from tests.fixtures.serve_process import ServeProcess, serving
from tests.fixtures.up_process import UpProcess

Server = ServeProcess | UpProcess

# Like python_backend's examples/decoupled repeat model: one response per element of IN, 0.3 s
# apart, from a thread after `execute` returned, then the final flag alone.
REPEAT_PY = """\
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()
            threading.Thread(target=self._send, args=(sender, values)).start()
        return None

    def _send(self, sender, values):
        for idx, value in enumerate(values):
            if idx:
                time.sleep(0.3)
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([value], np.int32)),
                pb_utils.Tensor("IDX", np.array([idx], np.uint32)),
            ]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

_REPEAT_CONFIG = """
name: "repeat"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }
]
"""

# repeat, then an identity of each response's OUT: the identity runs once per response.
_PIPELINE_CONFIG = """
name: "repeat_then_identity"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }
]
ensemble_scheduling { step [
  { model_name: "repeat" model_version: -1
    input_map { key: "IN" value: "IN" }
    output_map { key: "OUT" value: "repeated" }
    output_map { key: "IDX" value: "IDX" } },
  { model_name: "identity_int32" model_version: -1
    input_map { key: "INPUT0" value: "repeated" }
    output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""


@pytest.fixture(scope="module", params=["serve", "up"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    repo: Path = tmp_path_factory.mktemp("repo")
    (repo / "repeat" / "1").mkdir(parents=True)
    (repo / "repeat" / "1" / "model.py").write_text(REPEAT_PY)
    write_config(repo / "repeat", _REPEAT_CONFIG)
    make_python_identity(repo, "identity_int32", data_type="TYPE_INT32", dims=(1,))
    make_ensemble(repo, "repeat_then_identity", _PIPELINE_CONFIG)
    if request.param == "up":
        up = UpProcess(repo, "--warm-pool", "1", "--no-image-build")  # waits until ready
        try:
            yield up
        finally:
            up.stop()
        return
    with serving(repo) as proc:
        yield proc


def _stream(server: Server, values: list[int]) -> list[Any]:
    """Every message of one streamed request, through its empty final response."""
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        tensor = grpcclient.InferInput("IN", [len(values)], "INT32")
        tensor.set_data_from_numpy(np.array(values, np.int32))
        client.async_stream_infer(
            "repeat_then_identity", [tensor], request_id="r1", enable_empty_final_response=True
        )
        got = []
        while True:
            result, error = answers.get(timeout=60)
            assert error is None, error
            got.append(result)
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
        client.stop_stream()
    return got


def test_each_response_of_a_decoupled_step_is_a_response_of_the_ensemble(
    server: Server,
) -> None:
    got = _stream(server, [7, 8, 9])
    with_outputs = [r for r in got if r.get_response().outputs]
    assert [r.as_numpy("OUT").tolist() for r in with_outputs] == [[7], [8], [9]]
    assert [r.as_numpy("IDX").tolist() for r in with_outputs] == [[0], [1], [2]]
    assert {r.get_response().id for r in got} == {"r1"}
    # The end is Triton's flag-only final response, after the three.
    assert not got[-1].get_response().outputs


def test_a_decoupled_step_with_no_response_ends_the_ensemble_with_none(
    server: Server,
) -> None:
    got = _stream(server, [])
    assert len(got) == 1 and not got[0].get_response().outputs


def test_two_requests_on_one_stream_answer_as_they_come(server: Server) -> None:
    """An ensemble with a decoupled step answers like a decoupled model: the second request's
    responses do not wait for the first request's end (they did, as a default model's keep
    request order on a stream). Through `thaw up` the ensemble's replica, which serves the
    stream, learns that its step (in another replica) is decoupled from the repository."""
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for request_id, values in (("a", [1, 2, 3, 4]), ("b", [5])):
            tensor = grpcclient.InferInput("IN", [len(values)], "INT32")
            tensor.set_data_from_numpy(np.array(values, np.int32))
            client.async_stream_infer("repeat_then_identity", [tensor], request_id=request_id)
        order = []
        for _ in range(5):
            result, error = answers.get(timeout=60)
            assert error is None, error
            order.append((result.get_response().id, int(result.as_numpy("OUT")[0])))
        client.stop_stream()
    # b's one response comes 0.9 s before a's last, not after it.
    assert order.index(("b", 5)) < order.index(("a", 4)), order
