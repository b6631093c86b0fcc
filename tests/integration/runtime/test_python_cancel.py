"""A client that cancels its request reaches the Python model: `request.is_cancelled()` (and
the response sender's, for a decoupled model) turns True while `execute` still runs, as in
Triton's python_backend (qa/L0_backend_python/lifecycle `test_execute_cancel`), in a stub
process and in the server's own process. A request nobody cancels reads False.

The models poll `is_cancelled()` and write what they saw into their model directory; the
tests wait for that file (no wall-clock assert: the model gives up only after 30 s)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from tests.fixtures.models import python_model
from tests.fixtures.python_cancel_model import (
    WAIT_S,
    cancel_model_config,
    cancel_model_source,
    wait_for,
    wait_input,
)
from tests.fixtures.serve_process import ServeProcess, serving

pytestmark = pytest.mark.integration

MODELS = {
    "cancel_stub": ("process", False),
    "cancel_in_process": ("in_process", False),
    "cancel_stub_decoupled": ("process", True),
    "cancel_in_process_decoupled": ("in_process", True),
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python_cancel")
    for name, (runtime, decoupled) in MODELS.items():
        python_model(
            root,
            name,
            cancel_model_config(name, runtime, decoupled=decoupled),
            cancel_model_source(decoupled=decoupled),
        )
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServeProcess]:
    with serving(repo) as proc:
        yield proc


@pytest.mark.parametrize("model", ["cancel_stub", "cancel_in_process"])
def test_a_cancelled_grpc_call_is_seen_by_request_is_cancelled(
    server: ServeProcess, repo: Path, model: str
) -> None:
    done = threading.Event()
    outcome: dict[str, object] = {}

    def callback(result: object, error: object) -> None:
        outcome["result"], outcome["error"] = result, error
        done.set()

    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        call = client.async_infer(model, [wait_input(wait=True)], callback)
        wait_for(repo / model / "started")
        call.cancel()
        seen = wait_for(repo / model / "saw_cancel", repo / model / "gave_up")
    assert seen.name == "saw_cancel"
    assert done.wait(WAIT_S)
    assert outcome["result"] is None
    assert "CANCELLED" in str(outcome["error"])


@pytest.mark.parametrize("model", ["cancel_stub", "cancel_in_process"])
def test_a_request_nobody_cancels_reads_not_cancelled(server: ServeProcess, model: str) -> None:
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        result = client.infer(model, [wait_input(wait=False)])
    assert result.as_numpy("CANCELLED").tolist() == [False]


@pytest.mark.parametrize("model", ["cancel_stub_decoupled", "cancel_in_process_decoupled"])
def test_a_cancelled_stream_is_seen_by_the_response_sender(
    server: ServeProcess, repo: Path, model: str
) -> None:
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        client.start_stream(lambda result, error: None)
        client.async_stream_infer(model, [wait_input(wait=True)])
        wait_for(repo / model / "started")
        client.stop_stream(cancel_requests=True)
        seen = wait_for(repo / model / "saw_cancel", repo / model / "gave_up")
    assert seen.name == "saw_cancel"
