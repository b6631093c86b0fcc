"""`thaw serve --allow-sagemaker`: SageMaker's `/ping` and `/invocations` on their own port, as
tritonserver's (qa/L0_sagemaker's single-model cases): predictions in JSON and in binary tensors
with SageMaker's content types both ways, malformed binary headers refused with 400, the model
named by SAGEMAKER_TRITON_DEFAULT_MODEL_NAME (an unknown one in Triton's words), the safe port
range. The multi-model routes: test_sagemaker_multi_model.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import tritonclient.http as httpclient

from tests.fixtures.cloud_ports import DATA, add_sub_int32, address_from_log, infer_body
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    add_sub_int32(repo, "sm_model")
    return repo


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SAGEMAKER_")}


@pytest.fixture
def sagemaker(tmp_path: Path) -> Iterator[str]:
    """A ready `thaw serve` of sm_model with its SageMaker port: the port's URL."""
    server = ServeProcess(
        _repo(tmp_path), "--allow-sagemaker=true", "--sagemaker-port=0",
        env={"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "sm_model"},
    )  # fmt: skip
    try:
        server.wait_ready()
        yield address_from_log(server, "Sagemaker")
    finally:
        server.stop()


def test_ping_and_a_json_invocation(sagemaker: str) -> None:
    assert requests.get(sagemaker + "/ping", timeout=10).status_code == 200
    response = requests.post(sagemaker + "/invocations", data=infer_body()[0], timeout=10,
                             headers={"Content-Type": "application/json"})  # fmt: skip
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "application/json"
    assert "Inference-Header-Content-Length" not in response.headers
    result = response.json()
    assert result["model_name"] == "sm_model"
    assert result["outputs"][0]["data"] == (DATA * 2).ravel().tolist()


def test_binary_tensors_both_ways_with_sagemakers_content_types(sagemaker: str) -> None:
    body, header_length = infer_body(binary_inputs=True, binary_outputs=True)
    response = requests.post(
        sagemaker + "/invocations", data=body, timeout=10,
        headers={"Content-Type": f"{MIME}{header_length}", "Accept-Encoding": "gzip"},
    )  # fmt: skip
    assert response.status_code == 200, response.text
    content_type = response.headers["Content-Type"]
    assert content_type.startswith(MIME), content_type
    assert "Inference-Header-Content-Length" not in response.headers
    assert "Content-Encoding" not in response.headers  # never compressed, as Triton's
    result = httpclient.InferenceServerClient.parse_response_body(
        response.content, header_length=int(content_type[len(MIME) :])
    )
    assert (result.as_numpy("OUTPUT0") == DATA * 2).all()
    assert (result.as_numpy("OUTPUT1") == 0).all()


@pytest.mark.parametrize(
    "content_type",
    ["additional-string/{mime}{length}", "{mime}additional-string{length}", "{mime}-123",
     "{mime}12345"],
    ids=["mime-not-first", "size-not-a-number", "negative", "past-the-body"],
)  # fmt: skip
def test_a_malformed_binary_header_is_refused_with_400(sagemaker: str, content_type: str) -> None:
    body, header_length = infer_body(binary_inputs=True)
    header = content_type.format(mime=MIME, length=header_length)
    response = requests.post(sagemaker + "/invocations", data=body, timeout=10,
                             headers={"Content-Type": header})  # fmt: skip
    assert response.status_code == 400
    assert "error" in response.json()
    assert requests.post(sagemaker + "/invocations", data=infer_body()[0], timeout=10).ok


def test_what_sagemaker_does_not_route_is_refused(sagemaker: str) -> None:
    assert requests.get(sagemaker + "/models", timeout=10).json() == {"models": []}
    assert requests.post(sagemaker + "/models/m/invoke", timeout=10).status_code == 404
    assert requests.get(sagemaker + "/v2/health/ready", timeout=10).status_code == 400
    assert requests.get(sagemaker + "/invocations", timeout=10).status_code == 405
    assert requests.get(sagemaker + "/ping", timeout=10).status_code == 200


def test_an_invocation_without_a_default_model_names_tritons_placeholder(tmp_path: Path) -> None:
    server = ServeProcess(_repo(tmp_path), "--allow-sagemaker=true", "--sagemaker-port=0",
                          env={"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": ""})  # fmt: skip
    try:
        server.wait_ready()
        url = address_from_log(server, "Sagemaker")
        response = requests.post(url + "/invocations", data=b"dummy", timeout=10)
        assert response.status_code != 200
        assert response.json()["error"] == (
            "Request for unknown model: 'unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME' "
            "is not found"
        )
    finally:
        server.stop()


def _start(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "thaw.cli", "serve", *argv], capture_output=True, text=True,
        timeout=90, env={**_clean_env(), **(env or {})},
    )  # fmt: skip


def test_a_port_outside_the_safe_range_refuses_the_start_in_tritons_words(tmp_path: Path) -> None:
    proc = _start(str(_repo(tmp_path)), "--allow-sagemaker=true",
                  "--sagemaker-safe-port-range=8081-9000", "--allow-grpc=false",
                  "--allow-metrics=false", "--http-port=8000")  # fmt: skip
    assert proc.returncode == 2
    assert ("The server cannot listen to HTTP requests at port 8000, allowed port range is "
            "[8081, 9000]") in proc.stderr  # fmt: skip
    bad = _start(str(tmp_path), "--allow-sagemaker=true", "--sagemaker-safe-port-range=9000")
    assert bad.returncode == 2 and "'9000' is not LOW-HIGH" in bad.stderr
    mode = _start(str(tmp_path), "--allow-sagemaker=true",
                  env={"SAGEMAKER_TRITON_PING_MODE": "always"})  # fmt: skip
    assert mode.returncode == 2
    assert "SAGEMAKER_TRITON_PING_MODE = 'always', must be one of ready, live" in mode.stderr
