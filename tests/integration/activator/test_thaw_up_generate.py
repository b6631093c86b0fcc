"""Triton's generate extension through `thaw up`: `/generate` and `/generate_stream` (Server-Sent
Events) wake a model at zero like `/infer`, and each event reaches the client as the model sends
it, on the activator's path (a cold model) and on a connection handed to the replica (a warm
one)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.fixtures.midstream_model import (
    GRPC_ANSWERS,
    grpc_stream_answers,
    make_midstream_error,
    midstream_events,
)
from tests.fixtures.models import make_add_sub, python_model
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration

# Sends one event per gate file: event i once `<model dir>/go<i>` exists (event 0 at once), so
# a client that sees event i before it creates go<i+1> proves the stream is not buffered.
_TICKER = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            tag = pb_utils.get_input_tensor_by_name(request, "TAG").as_numpy()[0].decode()
            sender = request.get_response_sender()
            for i in range(n):
                gate = os.path.join(self.dir, f"{tag}.go{i}")
                deadline = time.monotonic() + 60
                while i and not os.path.exists(gate) and time.monotonic() < deadline:
                    time.sleep(0.01)
                out = pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
_TICKER_CONFIG = """
name: "ticker"
backend: "python"
model_transaction_policy { decoupled: true }
input [
  { name: "N" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "TAG" data_type: TYPE_STRING dims: [ 1 ] }
]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("up_generate")
    make_add_sub(root)
    python_model(root, "ticker", _TICKER_CONFIG, _TICKER)
    make_midstream_error(root, "midstream")
    return root


@pytest.fixture(scope="module")
def up(repo: Path) -> Iterator[UpProcess]:
    server = UpProcess(
        repo, "--warm-pool", "1", "--preload-frameworks", "", "--no-image-build",
        "--scale-to-zero-grace-s", "600",
    )  # fmt: skip
    yield server
    server.stop()


def _events(lines: Iterator[bytes]) -> Iterator[dict[str, object]]:
    for line in lines:
        if line.startswith(b"data: "):
            yield json.loads(line[len(b"data: ") :])


def _stream_step_by_step(up: UpProcess, repo: Path, session: requests.Session, tag: str) -> None:
    body = {"N": 3, "TAG": tag}
    url = f"{up.url}/v2/models/ticker/generate_stream"
    with session.post(url, json=body, stream=True, timeout=120) as response:
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = _events(response.iter_lines())
        for i in range(3):
            event = next(events)  # before go<i+1> exists: the model has sent only this one
            assert event == {"model_name": "ticker", "model_version": "1", "OUT": i}
            (repo / "ticker" / f"{tag}.go{i + 1}").touch()
        assert list(events) == []


def test_generate_wakes_a_model_at_zero_and_answers_as_triton(up: UpProcess) -> None:
    body = {"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1]}
    for path in ("/v2/models/add_sub/generate", "/v2/models/add_sub/versions/1/generate"):
        response = requests.post(up.url + path, json=body, timeout=120)
        assert response.status_code == 200, response.text
        assert response.json() == {
            "model_name": "add_sub",
            "model_version": "1",
            "OUTPUT0": [2.0, 3.0, 4.0, 5.0],
            "OUTPUT1": [0.0, 1.0, 2.0, 3.0],
        }


def test_a_stream_reaches_the_client_event_by_event_from_zero(up: UpProcess, repo: Path) -> None:
    assert up.model("ticker")["state"] == "cold"  # first woken by this request
    with requests.Session() as session:
        _stream_step_by_step(up, repo, session, "cold")


def test_generate_refusals_keep_their_shape(up: UpProcess, repo: Path) -> None:
    unknown = requests.post(up.url + "/v2/models/nope/generate_stream", json={}, timeout=30)
    assert unknown.status_code == 404
    assert "nope" in unknown.json()["error"]
    # Triton's text when /generate meets a model that sends other than one response.
    (repo / "ticker" / "many.go1").touch()
    many = requests.post(
        up.url + "/v2/models/ticker/generate", json={"N": 2, "TAG": "many"}, timeout=120
    )
    assert many.status_code == 500
    assert "use generate stream" in many.json()["error"]


def test_a_stream_on_a_handed_off_connection_is_event_by_event(up: UpProcess, repo: Path) -> None:
    with requests.Session() as warm:  # wakes the model; its replica can take connections
        _stream_step_by_step(up, repo, warm, "wake")
    before = _handed_off(up)
    with requests.Session() as session:  # a new connection to a warm model: handed off
        _stream_step_by_step(up, repo, session, "direct")
        _stream_step_by_step(up, repo, session, "direct_again")
    assert _handed_off(up) == before + 1


def _handed_off(up: UpProcess) -> float:
    for line in up.metrics().splitlines():
        if line.startswith('thaw_handoffs_total{model="ticker",result="handed_off"}'):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"[1, 2]", b'{"INPUT0": "abc", "INPUT1": [1]}', b'{"INPUT0": [1e999999]}'],
)
def test_hostile_generate_bodies_get_a_json_error_and_the_model_serves_on(
    up: UpProcess, body: bytes
) -> None:
    for path in ("/v2/models/add_sub/generate", "/v2/models/add_sub/generate_stream"):
        bad = requests.post(
            up.url + path, data=body, headers={"Content-Type": "application/json"}, timeout=120
        )
        assert 400 <= bad.status_code < 500, (path, bad.status_code, bad.text)
        assert isinstance(bad.json()["error"], str)
    good = {"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1]}
    ok = requests.post(up.url + "/v2/models/add_sub/generate", json=good, timeout=120)
    assert ok.status_code == 200, ok.text


def test_a_generate_body_over_the_cap_is_refused_before_it_is_read(up: UpProcess) -> None:
    size = 65 << 20  # over --max-body-bytes' 64 MiB default
    response = requests.post(
        up.url + "/v2/models/add_sub/generate",
        data=b"{" + b" " * (size - 2) + b"}",
        headers={"Content-Type": "application/json"},
        timeout=120,
    )
    assert response.status_code == 413
    assert "--max-body-bytes" in response.json()["error"]


def test_an_error_sent_without_the_final_flag_ends_no_stream_through_thaw_up(
    up: UpProcess,
) -> None:
    # The replica answers as Triton does (tests/integration/runtime/
    # test_triton_parity_python_answers.py); the front door's relays pass on what follows.
    for _ in range(2):  # the first wakes the model (activator path), the second is warm
        response = requests.post(
            up.url + "/v2/models/midstream/generate_stream", json={"text_input": "x"}, timeout=120
        )
        assert response.status_code == 200
        assert response.text == midstream_events("midstream")
    assert grpc_stream_answers(up.grpc_address, "midstream") == GRPC_ANSWERS
