"""`thaw serve --allow-vertex-ai`: Vertex AI's health and predict routes on their own port, as
tritonserver's (qa/L0_vertex_ai): predictions of the default model in JSON and in binary
tensors, a redirect to each v2 endpoint, malformed binary headers refused with 400, the
starts Triton refuses, and `AIP_MODE=PREDICTION` turning the HTTP port off."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from tests.fixtures.cloud_ports import DATA, add_sub_int32, address_from_log, infer_body
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

ROUTES = {
    "AIP_PREDICT_ROUTE": "/v1/endpoints/7/deployedModels/9:predict",
    "AIP_HEALTH_ROUTE": "/ping",
}
PREDICT = ROUTES["AIP_PREDICT_ROUTE"]
_STARTED = re.compile(r"Started Vertex AI HTTPService at (\S+?)\"")


def _repo(tmp_path: Path, *names: str) -> Path:
    repo = tmp_path / "repo"
    for name in names:
        add_sub_int32(repo, name)
    return repo


@pytest.fixture
def vertex(tmp_path: Path) -> Iterator[str]:
    """A `thaw serve` of add_sub and sub_add, add_sub the default model: its Vertex AI URL."""
    server = ServeProcess(
        _repo(tmp_path, "add_sub", "sub_add"),
        "--allow-vertex-ai=true", "--vertex-ai-port=0", "--vertex-ai-default-model=add_sub",
        env=ROUTES,
    )  # fmt: skip
    try:
        yield address_from_log(server, "Vertex AI")
    finally:
        server.stop()


def _outputs(response: requests.Response) -> tuple[np.ndarray, np.ndarray]:
    length = response.headers.get("Inference-Header-Content-Length")
    result = httpclient.InferenceServerClient.parse_response_body(
        response.content, header_length=int(length) if length is not None else None
    )
    return result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")


def test_health_and_a_json_prediction_of_the_default_model(vertex: str) -> None:
    assert requests.get(vertex + "/ping", timeout=10).status_code == 200
    body, _ = infer_body()
    response = requests.post(vertex + PREDICT, data=body, timeout=10)
    assert response.status_code == 200, response.text
    out0, out1 = _outputs(response)
    assert (out0 == DATA * 2).all() and (out1 == 0).all()
    assert response.json()["model_name"] == "add_sub"


def test_binary_tensors_by_content_type_both_ways(vertex: str) -> None:
    body, header_length = infer_body(binary_inputs=True, binary_outputs=True)
    content_type = f"application/vnd.vertex-ai-triton.binary+json;json-header-size={header_length}"
    response = requests.post(vertex + PREDICT, data=body, timeout=10,
                             headers={"Content-Type": content_type})  # fmt: skip
    assert response.status_code == 200, response.text
    assert "Inference-Header-Content-Length" in response.headers
    out0, out1 = _outputs(response)
    assert (out0 == DATA * 2).all() and (out1 == 0).all()


@pytest.mark.parametrize(
    "size",
    ["prefix/{mime}{length}", "{mime}not-a-number{length}", "{mime}-123", "{mime}123456"],
    ids=["mime-not-first", "size-not-a-number", "negative", "past-the-body"],
)
def test_a_malformed_binary_header_is_refused_with_400(vertex: str, size: str) -> None:
    body, header_length = infer_body(binary_inputs=True)
    mime = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
    content_type = size.format(mime=mime, length=header_length)
    response = requests.post(vertex + PREDICT, data=body, timeout=10,
                             headers={"Content-Type": content_type})  # fmt: skip
    assert response.status_code == 400
    assert "error" in response.json()
    # The server goes on serving.
    assert requests.post(vertex + PREDICT, data=infer_body()[0], timeout=10).status_code == 200


def _redirect(
    vertex: str, endpoint: str, body: bytes = b"", method: str = "POST"
) -> requests.Response:
    return requests.request(method, vertex + PREDICT, data=body, timeout=10,
                            headers={"X-Vertex-Ai-Triton-Redirect": endpoint})  # fmt: skip


def test_a_redirect_reaches_each_v2_endpoint(vertex: str) -> None:
    response = _redirect(vertex, "v2/models/sub_add/infer", infer_body()[0])
    assert response.status_code == 200 and response.json()["model_name"] == "sub_add"
    assert _redirect(vertex, "v2/health/live").status_code == 200
    assert _redirect(vertex, "v2/models/sub_add/ready").status_code == 200
    assert "extensions" in _redirect(vertex, "v2").json()
    assert _redirect(vertex, "v2/models/add_sub").json()["platform"] == "python"
    assert "version_policy" in _redirect(vertex, "v2/models/add_sub/config").json()
    stats = _redirect(vertex, "v2/models/stats").json()["model_stats"]
    assert {row["name"] for row in stats} == {"add_sub", "sub_add"}
    one = _redirect(vertex, "v2/models/sub_add/versions/1/stats").json()["model_stats"]
    assert [row["name"] for row in one] == ["sub_add"]
    assert "nv_inference_request_success" in _redirect(vertex, "metrics").text
    assert _redirect(vertex, "v2/systemsharedmemory/status").json() == []
    index = _redirect(vertex, "v2/repository/index").json()
    assert {row["name"] for row in index} == {"add_sub", "sub_add"}
    unload = _redirect(vertex, "v2/repository/models/sub_add/unload")
    assert unload.status_code != 200
    assert "explicit model load / unload is not allowed" in unload.json()["error"]


def test_what_vertex_ai_does_not_route_is_refused(vertex: str) -> None:
    assert _redirect(vertex, "v2", method="GET").status_code == 405  # redirects are POSTs
    refused = _redirect(vertex, "v2/logging")  # not among Triton's redirects
    assert refused.status_code == 400 and "X-Vertex-Ai-Triton-Redirect" in refused.json()["error"]
    assert requests.get(vertex + "/v2/health/ready", timeout=10).status_code == 400
    assert requests.post(vertex + "/ping", timeout=10).status_code == 405
    assert requests.get(vertex + PREDICT, timeout=10).status_code == 405
    assert _redirect(vertex, "v2/models/nobody/ready").status_code == 404  # as on the v2 port
    assert requests.get(vertex + "/ping", timeout=10).status_code == 200


def test_header_bytes_that_are_not_utf8_get_an_answer_not_a_crash(vertex: str) -> None:
    host, port = vertex.removeprefix("http://").rsplit(":", 1)
    for header in (b"Content-Type: \xff\xfe", b"X-Vertex-Ai-Triton-Redirect: v2/models/\xff/ready",
                   b"User-Agent: \xe9t\xe9"):  # fmt: skip
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST " + PREDICT.encode() + b" HTTP/1.1\r\nHost: x\r\n" + header +
                         b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")  # fmt: skip
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        status = int(answer.split(b" ", 2)[1])
        assert 400 <= status < 500, answer
        assert b'{"error":' in answer
    assert requests.get(vertex + "/ping", timeout=10).status_code == 200


def _refused_start(repo: Path, *argv: str, env: dict[str, str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "serve", str(repo), "--port=0", "--grpc-port=0",
         "--metrics-port=0", "--vertex-ai-port=0", *argv],
        capture_output=True, text=True, timeout=90, env={**_clean_env(), **env},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    return proc.stderr


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AIP_")}


@pytest.mark.parametrize(
    ("unset", "words"),
    [
        ("AIP_PREDICT_ROUTE", "API_PREDICT_ROUTE is not defined for Vertex AI endpoint"),
        ("AIP_HEALTH_ROUTE", "AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint"),
    ],
)
def test_a_start_without_a_route_fails_in_tritons_words(
    tmp_path: Path, unset: str, words: str
) -> None:
    env = {k: v for k, v in ROUTES.items() if k != unset}
    stderr = _refused_start(_repo(tmp_path, "add_sub"), "--allow-vertex-ai=true", env=env)
    assert f"failed to start Vertex AI service: {words}" in stderr


def test_the_default_model_must_be_loaded_or_the_only_one(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "add_sub", "sub_add")
    stderr = _refused_start(repo, "--allow-vertex-ai=true", env=ROUTES)
    assert "Expect the model repository contains only a single model if default model is not " \
        "specified" in stderr  # fmt: skip
    stderr = _refused_start(repo, "--allow-vertex-ai=true", "--vertex-ai-default-model=nobody",
                            env=ROUTES)  # fmt: skip
    assert "Expect the default model 'nobody' is loaded" in stderr


def test_aip_mode_prediction_serves_vertex_ai_from_aip_storage_uri_with_http_off(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path, "add_sub")
    env = {**_clean_env(), **ROUTES, "AIP_MODE": "PREDICTION", "AIP_STORAGE_URI": str(repo)}
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "thaw.cli", "serve", "--vertex-ai-port=0", "--grpc-port=0",
             "--metrics-port=0"],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not _STARTED.search(log.read_text()) and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.05)
        text = log.read_text()
        host_port = _STARTED.search(text)
        assert host_port is not None, text
        assert host_port.group(1).startswith("0.0.0.0:")  # Vertex AI's checks come from outside
        assert "Started HTTPService" not in text and "Started GRPCInferenceService" not in text
        port = host_port.group(1).split(":")[1]
        response = requests.post(
            f"http://127.0.0.1:{port}{PREDICT}", data=infer_body()[0], timeout=10
        )
        assert response.status_code == 200 and response.json()["model_name"] == "add_sub"
    finally:
        proc.terminate()
        proc.wait(30)
