"""`thaw serve --allow-sagemaker`: SageMaker's `/ping` and `/invocations` on their own port, as
tritonserver's (qa/L0_sagemaker's single-model cases): predictions in JSON and in binary tensors
with SageMaker's content types both ways, malformed binary headers refused with 400, the model
named by SAGEMAKER_TRITON_DEFAULT_MODEL_NAME (an unknown one in Triton's words), the safe port
range, and the multi-model routes refused with 501."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from tests.fixtures.models import make_add_sub
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="
_STARTED = re.compile(r"Started Sagemaker HTTPService at (\S+?)\"")
DATA = np.arange(16, dtype=np.int32).reshape(1, 16)


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    make_add_sub(repo, "sm_model", data_type="TYPE_INT32", dims=(16,), max_batch_size=8)
    return repo


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SAGEMAKER_")}


def _sagemaker_url(server: ServeProcess, timeout_s: float = 60) -> str:
    """The SageMaker port's URL, from the server's log line (Triton's words)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = _STARTED.search(server.logs())
        if found:
            return f"http://{found.group(1)}"
        if server.proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"no SageMaker port:\n{server.logs()}")


@pytest.fixture
def sagemaker(tmp_path: Path) -> Iterator[str]:
    """A ready `thaw serve` of sm_model with its SageMaker port: the port's URL."""
    server = ServeProcess(
        _repo(tmp_path), "--allow-sagemaker=true", "--sagemaker-port=0",
        env={"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "sm_model"},
    )  # fmt: skip
    try:
        server.wait_ready()
        yield _sagemaker_url(server)
    finally:
        server.stop()


def _body(*, binary_inputs: bool = False, binary_outputs: bool = False) -> tuple[bytes, int | None]:
    inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in (0, 1)]
    for tensor in inputs:
        tensor.set_data_from_numpy(DATA, binary_data=binary_inputs)
    outputs = [httpclient.InferRequestedOutput(f"OUTPUT{i}", binary_data=binary_outputs)
               for i in (0, 1)]  # fmt: skip
    body, header_length = httpclient.InferenceServerClient.generate_request_body(
        inputs, outputs=outputs
    )
    return body, header_length


def test_ping_and_a_json_invocation(sagemaker: str) -> None:
    assert requests.get(sagemaker + "/ping", timeout=10).status_code == 200
    response = requests.post(sagemaker + "/invocations", data=_body()[0], timeout=10,
                             headers={"Content-Type": "application/json"})  # fmt: skip
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "application/json"
    assert "Inference-Header-Content-Length" not in response.headers
    result = response.json()
    assert result["model_name"] == "sm_model"
    assert result["outputs"][0]["data"] == (DATA * 2).ravel().tolist()


def test_binary_tensors_both_ways_with_sagemakers_content_types(sagemaker: str) -> None:
    body, header_length = _body(binary_inputs=True, binary_outputs=True)
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
    body, header_length = _body(binary_inputs=True)
    header = content_type.format(mime=MIME, length=header_length)
    response = requests.post(sagemaker + "/invocations", data=body, timeout=10,
                             headers={"Content-Type": header})  # fmt: skip
    assert response.status_code == 400
    assert "error" in response.json()
    assert requests.post(sagemaker + "/invocations", data=_body()[0], timeout=10).ok


def test_what_sagemaker_does_not_route_is_refused(sagemaker: str) -> None:
    models = requests.get(sagemaker + "/models", timeout=10)
    assert models.status_code == 501 and "multi-model" in models.json()["error"]
    assert requests.post(sagemaker + "/models/m/invoke", timeout=10).status_code == 501
    assert requests.get(sagemaker + "/v2/health/ready", timeout=10).status_code == 400
    assert requests.get(sagemaker + "/invocations", timeout=10).status_code == 405
    assert requests.get(sagemaker + "/ping", timeout=10).status_code == 200


def test_an_invocation_without_a_default_model_names_tritons_placeholder(tmp_path: Path) -> None:
    server = ServeProcess(_repo(tmp_path), "--allow-sagemaker=true", "--sagemaker-port=0",
                          env={"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": ""})  # fmt: skip
    try:
        server.wait_ready()
        response = requests.post(_sagemaker_url(server) + "/invocations", data=b"dummy",
                                 timeout=10)  # fmt: skip
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
