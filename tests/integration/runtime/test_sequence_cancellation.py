"""A request of a sequence cancelled by its client before it ran cancels its sequence, as
Triton's sequence batcher does (qa/L0_request_cancellation's scheduler_test.py): the sequence's
later waiting requests are answered CANCELLED, each counted a CANCELED failure; a request that
already runs finishes. tritonclient (gRPC) is the client, `thaw serve` a real process.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from tests.fixtures import models
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

_SLOW_IDENTITY = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(2.0)
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""


def _config(strategy: str) -> str:
    return f"""
        backend: "python"
        max_batch_size: 1
        input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
        output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
        instance_group [ {{ count: 1 kind: KIND_CPU }} ]
        sequence_batching {{ {strategy} max_sequence_idle_microseconds: 6000000 }}
    """


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo: Path = tmp_path_factory.mktemp("sequence_cancel")
    models.python_model(repo, "direct_one_slot", _config("direct { }"), _SLOW_IDENTITY)
    models.python_model(
        repo, "oldest_one", _config("oldest { max_candidate_sequences: 1 }"), _SLOW_IDENTITY
    )
    proc = ServeProcess(repo)
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def _inputs() -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 2), np.float32))
    return [tensor]


def _waiting(
    client: grpcclient.InferenceServerClient, model: str, sequence_id: int, *, start: bool
) -> tuple[Any, dict[str, Any]]:
    answer: dict[str, Any] = {}

    def callback(result: Any, error: Any) -> None:
        answer.update(result=result, error=error)

    future = client.async_infer(
        model, _inputs(), callback, sequence_id=sequence_id, sequence_start=start
    )
    return future, answer


def _canceled(server: ServeProcess, model: str) -> int:
    text = requests.get(f"{server.url}/metrics", timeout=30).text
    labels = (f'model="{model}"', 'reason="CANCELED"')
    for line in text.splitlines():
        if line.startswith("nv_inference_request_failure{") and all(x in line for x in labels):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def _assert_cancelled(answer: dict[str, Any]) -> None:
    assert answer.get("result") is None
    assert answer["error"].status() == "StatusCode.CANCELLED"


@pytest.mark.parametrize("model", ["direct_one_slot", "oldest_one"])
def test_a_queued_request_cancelled_cancels_the_rest_of_its_sequence(
    server: ServeProcess, model: str
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_address)
    before = _canceled(server, model)
    with concurrent.futures.ThreadPoolExecutor() as pool:
        running = pool.submit(client.infer, model, _inputs(), sequence_id=11, sequence_start=True)
        time.sleep(0.5)  # the first request runs (2 s)
        queued = [_waiting(client, model, 11, start=False) for _ in range(2)]
        time.sleep(0.5)
        assert not queued[0][1] and not queued[1][1]
        queued[0][0].cancel()
        time.sleep(0.5)
        _assert_cancelled(queued[0][1])
        _assert_cancelled(queued[1][1])  # not cancelled by its client: by its sequence
        assert running.result().as_numpy("OUTPUT0").shape == (1, 2)  # ran: finishes
    assert _canceled(server, model) == before + 2


def test_a_backlogged_request_cancelled_cancels_its_whole_backlogged_sequence(
    server: ServeProcess,
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_address)
    model = "direct_one_slot"
    before = _canceled(server, model)
    with concurrent.futures.ThreadPoolExecutor() as pool:
        holder = pool.submit(client.infer, model, _inputs(), sequence_id=21, sequence_start=True)
        time.sleep(0.5)  # sequence 21 holds the one slot
        backlog = [_waiting(client, model, 22, start=i == 0) for i in range(2)]
        time.sleep(0.5)
        backlog[0][0].cancel()
        time.sleep(0.5)
        _assert_cancelled(backlog[0][1])
        _assert_cancelled(backlog[1][1])
        holder.result()
    assert _canceled(server, model) == before + 2
