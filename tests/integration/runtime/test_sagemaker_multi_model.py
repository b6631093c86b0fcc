"""`thaw serve --allow-sagemaker`: SageMaker's multi-model endpoint (`/models`), as tritonserver
2.51's (qa/L0_sagemaker's multi-model cases and more): models loaded at run time from the
directories SageMaker downloads, each its own repository and namespace, listed, invoked in JSON
and binary tensors, unloaded with their repository; an ensemble and its steps from one
directory; 409 for a name loaded twice, 404 for one not loaded, 507 for a load or invocation
that ran out of memory, 400 with why for the rest; the server serves on through each."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import tritonclient.http as httpclient

from tests.fixtures.cloud_ports import DATA, address_from_log, infer_body
from tests.fixtures.sagemaker_downloads import (
    add_sub_download,
    ensemble_download,
    out_of_memory_download,
)
from tests.fixtures.serve_process import ServeProcess, raw_answer

pytestmark = pytest.mark.integration

MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="
TARGET = "X-Amzn-SageMaker-Target-Model"
EXPLICIT = ("--model-control-mode=explicit", "--model-namespacing=true")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServeProcess]:
    """`thaw serve` as SageMaker's `serve` script starts it for a multi-model endpoint: an
    empty repository, explicit model control, namespacing, the SageMaker port."""
    (tmp_path / "empty").mkdir()
    process = ServeProcess(tmp_path / "empty", *EXPLICIT, "--allow-sagemaker=true",
                           "--sagemaker-port=0")  # fmt: skip
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


def _load(url: str, name: str, model_url: str, **headers: str) -> requests.Response:
    return requests.post(url + "/models", data=json.dumps({"model_name": name, "url": model_url}),
                         headers={"Content-Type": "application/json", **headers},
                         timeout=120)  # fmt: skip


def _invoke(url: str, name: str, **headers: str) -> requests.Response:
    return requests.post(f"{url}/models/{name}/invoke", data=infer_body()[0], timeout=30,
                         headers={"Content-Type": "application/json", **headers})  # fmt: skip


def test_load_list_get_invoke_unload_as_sagemaker_does(
    server: ServeProcess, tmp_path: Path
) -> None:
    url = address_from_log(server, "Sagemaker")
    models = tmp_path / "opt-ml-models"
    one = add_sub_download(models, "123456789abcdefghi", "sm_mme_model_1")
    two = add_sub_download(models, "987654321ihgfedcba", "sm_mme_model_2")
    assert _load(url, "sm_mme_model_1", one).status_code == 200
    again = _load(url, "sm_mme_model_1", one)
    assert again.status_code == 409 and "error" in again.json()
    assert _load(url, "sm_mme_model_2", two).status_code == 200

    listed = requests.get(url + "/models", timeout=10).json()["models"]
    assert sorted(listed, key=lambda row: row["modelName"]) == [
        {"modelName": "sm_mme_model_1", "modelUrl": str(models / "123456789abcdefghi")},
        {"modelName": "sm_mme_model_2", "modelUrl": str(models / "987654321ihgfedcba")},
    ]
    got = requests.get(url + "/models/sm_mme_model_1", timeout=10)
    assert got.json() == {"modelName": "sm_mme_model_1",
                          "modelUrl": str(models / "123456789abcdefghi")}  # fmt: skip
    assert requests.get(url + "/models/nothing", timeout=10).status_code == 404

    answer = _invoke(url, "sm_mme_model_1")
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json()["model_name"] == "sm_mme_model_1"
    assert answer.json()["outputs"][0]["data"] == (DATA * 2).ravel().tolist()
    body, header_length = infer_body(binary_inputs=True, binary_outputs=True)
    binary = requests.post(url + "/models/sm_mme_model_2/invoke", data=body, timeout=30,
                           headers={"Content-Type": f"{MIME}{header_length}"})  # fmt: skip
    content_type = binary.headers["Content-Type"]
    assert binary.status_code == 200 and content_type.startswith(MIME), binary.text
    result = httpclient.InferenceServerClient.parse_response_body(
        binary.content, header_length=int(content_type[len(MIME) :])
    )
    assert (result.as_numpy("OUTPUT0") == DATA * 2).all()
    # Both are models of the server's v2 port too, each in its own namespace.
    v2 = httpclient.InferenceServerClient(server.hostport)
    assert v2.is_model_ready("sm_mme_model_1") and v2.is_model_ready("sm_mme_model_2")

    assert requests.delete(url + "/models/sm_mme_model_1", timeout=60).status_code == 200
    assert requests.delete(url + "/models/sm_mme_model_1", timeout=60).status_code == 404
    assert _invoke(url, "sm_mme_model_1").status_code == 404
    assert requests.get(url + "/models", timeout=10).json()["models"] == [
        {"modelName": "sm_mme_model_2", "modelUrl": str(models / "987654321ihgfedcba")}
    ]
    assert "sm_mme_model_1" not in {row["name"] for row in v2.get_model_repository_index()}
    # Its repository went with it: the same directory loads again.
    assert _load(url, "sm_mme_model_1", one).status_code == 200
    assert _invoke(url, "sm_mme_model_1").status_code == 200
    assert requests.delete(url + "/models/never_loaded", timeout=10).status_code == 404


def test_the_target_model_header_names_the_model(server: ServeProcess, tmp_path: Path) -> None:
    url = address_from_log(server, "Sagemaker")
    one = add_sub_download(tmp_path / "models", "abc123", "whatever_the_config_says")
    loaded = _load(url, "abc123", one, **{TARGET: "resnet.tar.gz"})
    assert loaded.status_code == 200, loaded.text
    v2 = httpclient.InferenceServerClient(server.hostport)
    assert v2.get_model_config("resnet.tar.gz")["name"] == "resnet.tar.gz"
    assert _invoke(url, "abc123", **{TARGET: "resnet.tar.gz"}).json()["model_name"] == (
        "resnet.tar.gz"
    )
    assert _invoke(url, "abc123").status_code == 200  # the name it was loaded under
    assert requests.delete(url + "/models/abc123", timeout=60,
                           headers={TARGET: "resnet.tar.gz"}).status_code == 200  # fmt: skip
    assert not v2.is_model_ready("resnet.tar.gz")


def test_an_ensemble_loads_with_its_steps_from_one_directory(
    server: ServeProcess, tmp_path: Path
) -> None:
    url = address_from_log(server, "Sagemaker")
    where = ensemble_download(tmp_path / "models", "123456789ensemble")
    loaded = _load(url, "123456789ensemble", where, **{TARGET: "123456789ensemble"})
    assert loaded.status_code == 200, loaded.text
    inputs = [{"name": f"INPUT{i}", "datatype": "INT32", "shape": [1, 16],
               "data": DATA.ravel().tolist()} for i in (0, 1)]  # fmt: skip
    answer = requests.post(url + "/models/123456789ensemble/invoke", json={"inputs": inputs},
                           timeout=30)  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["data"] == (DATA * 3).ravel().tolist()
    assert requests.get(url + "/models/123456789ensemble", timeout=10).json()["modelUrl"] == where
    v2 = httpclient.InferenceServerClient(server.hostport)
    assert v2.is_model_ready("first")
    assert requests.delete(url + "/models/123456789ensemble", timeout=60).status_code == 200
    # Its steps went down with it (unloaded with its dependents).
    assert not v2.is_model_ready("first") and not v2.is_model_ready("second")


def test_out_of_memory_is_507_and_the_rest_400_with_why(
    server: ServeProcess, tmp_path: Path
) -> None:
    url = address_from_log(server, "Sagemaker")
    models = tmp_path / "models"
    at_load = _load(url, "big", out_of_memory_download(models, "big", "init"))
    assert at_load.status_code == 507, at_load.text
    assert "out of memory" in at_load.json()["error"]
    assert _load(url, "big", str(models / "big" / "model")).status_code == 507  # not 409: gone
    assert requests.get(url + "/models", timeout=10).json() == {"models": []}

    runs_out = out_of_memory_download(models, "runs_out", "execute")
    assert _load(url, "runs_out", runs_out).status_code == 200
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4],
                        "data": [1, 2, 3, 4]}]}  # fmt: skip
    ran_out = requests.post(url + "/models/runs_out/invoke", json=body, timeout=30)
    assert ran_out.status_code == 507 and "out of memory" in ran_out.json()["error"]
    wrong = requests.post(url + "/models/runs_out/invoke", json={"inputs": []}, timeout=30)
    assert wrong.status_code == 400 and "error" in wrong.json()

    for refused in (
        _load(url, "x", str(tmp_path / "nowhere")),
        _load(url, "x", "relative/path"),
        _load(url, "x", "/"),
        requests.post(url + "/models", data=b"{not json", timeout=10),
        requests.post(url + "/models", json={"model_name": "x"}, timeout=10),
        requests.post(url + "/models", json=["x"], timeout=10),
        requests.post(url + "/models", data=b"x" * 70_000, timeout=10),
        _load(url, "x", str(models / "runs_out" / "model"), **{TARGET: "../escape"}),
        requests.put(url + "/models/x", timeout=10),
    ):
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]
    assert requests.get(server.url + "/v2/health/live", timeout=10).status_code == 200


def test_registration_needs_explicit_model_control(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    process = ServeProcess(tmp_path / "empty", "--allow-sagemaker=true", "--sagemaker-port=0")
    try:
        process.wait_ready()
        url = address_from_log(process, "Sagemaker")
        refused = _load(url, "m", add_sub_download(tmp_path / "models", "m", "m"))
        assert refused.status_code == 400
        assert refused.json()["error"] == (
            "repository registration is not allowed if model control mode is not EXPLICIT"
        )
    finally:
        process.stop()


def test_a_load_body_that_never_arrives_or_an_undecodable_name_is_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "empty").mkdir()
    process = ServeProcess(tmp_path / "empty", *EXPLICIT, "--allow-sagemaker=true",
                           "--sagemaker-port=0", "--body-timeout-s=1")  # fmt: skip
    try:
        process.wait_ready()
        url = address_from_log(process, "Sagemaker")
        started = time.monotonic()
        head = b"POST /models HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
        slow = raw_answer(url, head + b'{"mo')
        assert slow.startswith(b"HTTP/1.1 408") and b"did not arrive within 1 s" in slow
        assert time.monotonic() - started < 20
        body = json.dumps({"model_name": "m", "url": add_sub_download(tmp_path, "d", "m")})
        undecodable = raw_answer(url, b"POST /models HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                           b"X-Amzn-SageMaker-Target-Model: \xff\xfe\r\n\r\n%s"
                           % (len(body), body.encode()))  # fmt: skip
        assert undecodable.startswith(b"HTTP/1.1 400") and b"is not a model name" in undecodable
        assert _load(url, "m", str(tmp_path / "d" / "model")).status_code == 200
    finally:
        process.stop()
