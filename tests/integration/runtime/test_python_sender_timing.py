"""A non-decoupled Python model's response sender, as Triton's python_backend runs it
(qa/L0_backend_python/response_sender): a sent response goes to the client at once, even while
`execute` still runs; one sent after `execute` returned None answers the request; the first
response wins (a returned response or an error after it is not what the client sees); a sender
the model lets go of without a response ends its request with an error, never a hang.

Sent-at-once is told without a clock: the model holds `execute` open until the test, having
its answer, writes a `release` file (it gives up after 30 s and notes `returned` either way)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import python_model
from tests.fixtures.serve_process import ServeProcess, serving

pytestmark = pytest.mark.integration

_COMMON_PY = """
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _response(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], np.int32))])


class TritonPythonModel:
    def initialize(self, args):
        self.dir = args["model_repository"]

    def execute(self, requests):
        answers = [self.answer(request) for request in requests]
        # As Triton's qa response_sender model: None, not a list of None, when none returns.
        return None if answers == [None] * len(requests) else answers
"""

_BEHAVIOURS = {
    # Sends 1, then holds execute open until the test releases it; returns None.
    "sender_at_once": """
    def answer(self, request):
        request.get_response_sender().send(
            _response(1), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        )
        release = os.path.join(self.dir, "release")
        deadline = time.monotonic() + 30
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.02)
        open(os.path.join(self.dir, "returned"), "w").close()
        return None
""",
    # Returns None; a thread sends 2 (and the final flag) a little later.
    "sender_after_return": """
    def answer(self, request):
        sender = request.get_response_sender()

        def later():
            time.sleep(0.3)
            sender.send(_response(2))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

        threading.Thread(target=later, daemon=True).start()
        return None
""",
    # Sends 3 with the final flag, then returns 4 as well: the client sees 3.
    "sender_then_return": """
    def answer(self, request):
        request.get_response_sender().send(
            _response(3), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        )
        return _response(4)
""",
    # Sends 5, then a second response, which raises in execute: the client sees 5.
    "sender_twice": """
    def answer(self, request):
        sender = request.get_response_sender()
        sender.send(_response(5))
        sender.send(_response(6))
        return None
""",
    # Takes the sender, sends nothing, returns None: the request ends with an error.
    "sender_dropped": """
    def answer(self, request):
        request.get_response_sender()
        return None
""",
}


def _config(name: str, runtime: str) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        f'parameters {{ key: "thaw.python_runtime" value: {{ string_value: "{runtime}" }} }}\n'
    )


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python_sender_timing")
    for name, body in _BEHAVIOURS.items():
        for runtime, model in (("process", name), ("in_process", f"{name}_in_process")):
            python_model(root, model, _config(model, runtime), _COMMON_PY + body)
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServeProcess]:
    with serving(repo) as proc:
        yield proc


def _infer_grpc(server: ServeProcess, model: str) -> list[int]:
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([0], np.int32))
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        return client.infer(model, [tensor]).as_numpy("OUT").tolist()


def _infer_http(server: ServeProcess, model: str) -> list[int]:
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([0], np.int32))
    with httpclient.InferenceServerClient(server.hostport) as client:
        return client.infer(model, [tensor]).as_numpy("OUT").tolist()


@pytest.mark.parametrize("model", ["sender_at_once", "sender_at_once_in_process"])
def test_a_sent_response_reaches_the_client_while_execute_still_runs(
    server: ServeProcess, repo: Path, model: str
) -> None:
    model_dir = repo / model
    try:
        assert _infer_http(server, model) == [1]
        assert not (model_dir / "returned").exists(), "the answer waited for execute to return"
    finally:
        (model_dir / "release").touch()
    deadline = time.monotonic() + 30
    while not (model_dir / "returned").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    (model_dir / "release").unlink()
    (model_dir / "returned").unlink()
    # The instance is free again: the next request is served the same way.
    try:
        assert _infer_grpc(server, model) == [1]
    finally:
        (model_dir / "release").touch()


@pytest.mark.parametrize("model", ["sender_after_return", "sender_after_return_in_process"])
def test_a_response_sent_after_execute_returned_answers_the_request(
    server: ServeProcess, model: str
) -> None:
    assert _infer_grpc(server, model) == [2]
    assert _infer_http(server, model) == [2]


@pytest.mark.parametrize("model", ["sender_then_return", "sender_then_return_in_process"])
def test_a_response_returned_after_the_sent_one_is_not_what_the_client_sees(
    server: ServeProcess, model: str
) -> None:
    assert _infer_grpc(server, model) == [3]


@pytest.mark.parametrize("model", ["sender_twice", "sender_twice_in_process"])
def test_a_second_sent_response_fails_the_model_not_the_answered_client(
    server: ServeProcess, model: str
) -> None:
    assert _infer_grpc(server, model) == [5]


@pytest.mark.parametrize("model", ["sender_dropped", "sender_dropped_in_process"])
def test_a_sender_let_go_without_a_response_ends_the_request_with_an_error(
    server: ServeProcess, model: str
) -> None:
    with pytest.raises(InferenceServerException, match="without sending a response"):
        _infer_grpc(server, model)
