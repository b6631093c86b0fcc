"""`thaw serve` answers as real Triton does on HTTP framing, URLs, output selection and labels.

A third side-by-side audit (after test_triton_parity.py and test_triton_parity_requests.py):
Triton 2.51 (`tritonserver` from nvidia-pytriton, python backend, `--model-control-mode=explicit`)
and `thaw serve` on one repository of Python-backend models, sent the same bytes over raw
sockets, `requests` and gRPC stubs, their status lines, headers and bodies diffed. Each expected
value below is what Triton answered; the tests themselves need no Triton. Where Thaw keeps
DESIGN.md's status (bad input is 400, Triton says 500), the test says so and pins Triton's text.
docs/triton-http-parity.md lists what differed, what was fixed and what is kept different.
"""

from __future__ import annotations

import gzip
import json
import socket
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import requests
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.fixtures.models import ADD_SUB_SAME_DTYPE_PY
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

_IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
"""
_ADD_SUB_CONFIG = """
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""
_LABELLED = """
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
"""
# name: (config, model.py, label file or None)
_MODELS: dict[str, tuple[str, str, str | None]] = {
    "add_sub": (_ADD_SUB_CONFIG, ADD_SUB_SAME_DTYPE_PY, None),
    "classify": (_LABELLED, _IDENTITY, "cat\ndog\nbird\nfish\n"),
    "classify_short": (_LABELLED, _IDENTITY, "cat\ndog\n"),
    "classify_missing": (_LABELLED, _IDENTITY, None),
}
_LOADED = ["add_sub", "classify", "classify_short"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("parity_framing_repo")
    for name, (config, source, labels) in _MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        text = f'name: "{name}"\nbackend: "python"\n' + textwrap.dedent(config)
        (repo / name / "config.pbtxt").write_text(text)
        (repo / name / "1" / "model.py").write_text(textwrap.dedent(source))
        if labels is not None:
            (repo / name / "labels.txt").write_text(labels)
    args = ["--model-control-mode", "explicit"]
    for name in _LOADED:
        args += ["--load-model", name]
    process = ServeProcess(Path(repo), *args)
    try:
        process.wait_ready()
        yield process
    finally:
        rc = process.stop()
    assert rc == 0, process.logs()


@pytest.fixture(scope="module")
def url(server: ServeProcess) -> str:
    return server.url


@pytest.fixture(scope="module")
def stub(server: ServeProcess) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    channel = grpc.insecure_channel(server.grpc_address)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def _post(url: str, path: str, body: Any) -> requests.Response:
    return requests.post(url + path, json=body, timeout=30)


# -- classification -----------------------------------------------------------------------

_SCORES = [{"name": "X", "datatype": "FP32", "shape": [4], "data": [0.1, 0.9, 0.5, 0.2]}]


def _classes(url: str, model: str, count: int, **params: Any) -> requests.Response:
    outputs = [{"name": "Y", "parameters": {"classification": count, **params}}]
    return _post(url, f"/v2/models/{model}/infer", {"inputs": _SCORES, "outputs": outputs})


def test_classification_appends_the_label_files_labels(url: str) -> None:
    # Triton reads `label_filename` (beside config.pbtxt) at load: "value:index:label".
    doc = _classes(url, "classify", 2).json()
    assert doc["outputs"] == [
        {"name": "Y", "datatype": "BYTES", "shape": [2],
         "data": ["0.900000:1:dog", "0.500000:2:bird"]}
    ]  # fmt: skip
    # A class past the file's last line has no label.
    short = _classes(url, "classify_short", 4).json()["outputs"][0]["data"]
    assert short == ["0.900000:1:dog", "0.500000:2", "0.200000:3", "0.100000:0:cat"]


def test_classification_labels_travel_binary_and_over_grpc(
    url: str, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    response = _classes(url, "classify", 2, binary_data=True)
    header = (
        b'{"model_name":"classify","model_version":"1","outputs":[{"name":"Y","datatype":"BYTES",'
        b'"shape":[2],"parameters":{"binary_data_size":37}}]}'
    )
    two = b"\x0e\x00\x00\x000.900000:1:dog\x0f\x00\x00\x000.500000:2:bird"
    assert response.content == header + two
    request = service_pb2.ModelInferRequest(model_name="classify")
    request.inputs.add(name="X", datatype="FP32", shape=[4]).contents.fp32_contents.extend(
        _SCORES[0]["data"]
    )
    request.outputs.add(name="Y").parameters["classification"].int64_param = 2
    answer = stub.ModelInfer(request, timeout=30)
    assert list(answer.raw_output_contents) == [two]


def test_a_missing_label_file_fails_the_load_in_tritons_words(url: str) -> None:
    response = _post(url, "/v2/repository/models/classify_missing/load", None)
    assert response.status_code == 400
    # Triton: "... Internal: failed to open text file for read <repo>/classify_missing/labels.txt:
    # No such file or directory" (Thaw names the file from the repository, not the disk).
    assert response.json()["error"].endswith(
        "failed to open text file for read classify_missing/labels.txt: No such file or directory"
    )


# -- the infer response -------------------------------------------------------------------

_ADD_SUB_INPUTS = [
    {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
    {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
]


def test_an_empty_request_id_is_left_out_of_the_response(url: str) -> None:
    doc = _post(url, "/v2/models/add_sub/infer", {"id": "", "inputs": _ADD_SUB_INPUTS}).json()
    assert list(doc) == ["model_name", "model_version", "outputs"]  # Thaw sent "id": ""
    doc = _post(url, "/v2/models/add_sub/infer", {"id": "7", "inputs": _ADD_SUB_INPUTS}).json()
    assert list(doc) == ["id", "model_name", "model_version", "outputs"]


# -- versions in URLs and messages ----------------------------------------------------------

_STOL = (
    "failed to get model version from specified version string '{}' (details: stol), version "
    "should be an integral value > 0"
)


def test_a_version_with_leading_zeros_is_that_version(
    url: str, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    # Triton reads a version with std::stol: `01` is version 1 (Thaw said version 01 is unknown).
    metadata = requests.get(f"{url}/v2/models/add_sub/versions/01", timeout=30)
    assert (metadata.status_code, metadata.json()["versions"]) == (200, ["1"])
    ready = requests.get(f"{url}/v2/models/add_sub/versions/0001/ready", timeout=30)
    assert ready.status_code == 200
    doc = _post(url, "/v2/models/add_sub/versions/01/infer", {"inputs": _ADD_SUB_INPUTS}).json()
    assert doc["model_version"] == "1"
    request = service_pb2.ModelMetadataRequest(name="add_sub", version="01")
    assert list(stub.ModelMetadata(request, timeout=30).versions) == ["1"]
    infer = service_pb2.ModelInferRequest(model_name="add_sub", model_version="001")
    for entry in _ADD_SUB_INPUTS:
        tensor = infer.inputs.add(name=entry["name"], datatype="FP32", shape=[4])
        tensor.contents.fp32_contents.extend(entry["data"])
    assert stub.ModelInfer(infer, timeout=30).model_version == "1"


def test_digits_past_int64_in_a_url_are_400_in_tritons_words(url: str) -> None:
    big = "9223372036854775808"
    for path in (f"/v2/models/add_sub/versions/{big}", f"/v2/models/add_sub/versions/{big}/ready"):
        response = requests.get(url + path, timeout=30)
        # Triton: 400 (Thaw said 404, "invalid version"); INT64_MAX itself is an unknown version.
        assert (response.status_code, response.json()) == (400, {"error": _STOL.format(big)})
    response = requests.get(f"{url}/v2/models/add_sub/versions/{int(big) - 1}", timeout=30)
    assert response.status_code == 404
    # Not digits at all: Triton's routes do not match (404, "Not Found").
    assert requests.get(f"{url}/v2/models/add_sub/versions/+1", timeout=30).status_code == 404


# -- bytes of the small answers -------------------------------------------------------------


def test_server_metadata_is_compact_json_as_tritons(url: str) -> None:
    # Triton 2.51's `/v2` has no spaces (Thaw's had ", " and ": ", the activator's none).
    body = requests.get(f"{url}/v2", timeout=30).content
    assert body.startswith(b'{"name":"triton","version":"')
    assert b'"extensions":["classification","sequence","model_repository",' in body


def _with_header_length(url: str, value: str) -> requests.Response:
    body = json.dumps({"inputs": _ADD_SUB_INPUTS}).encode()
    headers = {"Inference-Header-Content-Length": value}
    return requests.post(f"{url}/v2/models/add_sub/infer", data=body, headers=headers, timeout=30)


def test_a_header_length_outside_the_body_has_tritons_range_text(url: str) -> None:
    size = len(json.dumps({"inputs": _ADD_SUB_INPUTS}))
    for value in ("-1", "99999999999999999999999"):
        response = _with_header_length(url, value)
        # Thaw said "invalid Inference-Header-Content-Length '-1'".
        expected = f"inference header size should be in range (0, {size}), got: {value}"
        assert (response.status_code, response.json()) == (400, {"error": expected})
    # A sign is a number's (Triton reads it with strtol): `+N` is N.
    signed = _with_header_length(url, f"+{size}")
    assert signed.status_code == 200, signed.text
    # What is no number at all Triton reads as 0 (a raw body); Thaw refuses it (kept).
    assert _with_header_length(url, "abc").status_code == 400


# -- JSON members of the wrong kind -------------------------------------------------------

_X0, _X1 = _ADD_SUB_INPUTS
_NON_ARRAY = "attempt to access JSON non-array as array"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"),
        ({"inputs": {}}, f"Unable to parse 'inputs': {_NON_ARRAY}"),
        ({"inputs": [{**_X0, "shape": "4"}, _X1]}, f"Unable to parse 'shape': {_NON_ARRAY}"),
        ({"inputs": [{**_X0, "datatype": "fp32"}, _X1]}, "invalid datatype for input INPUT0"),
        (
            {"inputs": _ADD_SUB_INPUTS, "id": 5},
            "Unable to parse 'id': attempt to access JSON non-string as string",
        ),
        (
            {"inputs": _ADD_SUB_INPUTS, "parameters": None},  # Thaw took null for {}
            "failed to get request params.: attempt to get members for non-object",
        ),
        (
            {"inputs": _ADD_SUB_INPUTS, "parameters": []},
            "failed to get request params.: attempt to get members for non-object",
        ),
        (
            {"inputs": _ADD_SUB_INPUTS, "parameters": {"binary_data_output": "yes"}},
            "Unable to parse 'binary_data_output': attempt to access JSON non-boolean as boolean",
        ),
        (
            {"inputs": _ADD_SUB_INPUTS, "outputs": {"name": "OUTPUT0"}},
            f"Unable to parse 'outputs': {_NON_ARRAY}",
        ),
        (
            {"inputs": _ADD_SUB_INPUTS, "outputs": [{}]},
            "Unable to parse 'name': attempt to access non-existing object member 'name'",
        ),
        (
            {"inputs": _ADD_SUB_INPUTS, "outputs": [{"name": 5}]},
            "Unable to parse 'name': attempt to access JSON non-string as string",
        ),
        (
            {"inputs": _ADD_SUB_INPUTS,
             "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": 1}}]},
            "Unable to parse 'binary_data': attempt to access JSON non-boolean as boolean",
        ),
        (
            {"inputs": _ADD_SUB_INPUTS,
             "outputs": [{"name": "OUTPUT0", "parameters": {"classification": -1}}]},
            "Unable to set 'classification': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer",
        ),
    ],
)  # fmt: skip
def test_a_json_member_of_the_wrong_kind_has_tritons_text(
    url: str, body: dict[str, Any], message: str
) -> None:
    # Triton answers these 500 (its JSON reader's exception); DESIGN.md: bad input is 400.
    response = _post(url, "/v2/models/add_sub/infer", body)
    assert (response.status_code, response.json()) == (400, {"error": message})


# -- HTTP framing -------------------------------------------------------------------------


def test_a_body_coding_other_than_gzip_or_deflate_is_tritons_501(url: str) -> None:
    body = json.dumps({"inputs": _ADD_SUB_INPUTS}).encode()
    response = requests.post(
        f"{url}/v2/models/add_sub/infer",
        data=body,
        headers={"Content-Encoding": "br"},
        timeout=30,
    )
    # Triton 2.51: 501, its codings in Accept-Encoding (Thaw said 400, "unsupported
    # Content-Encoding 'br'; use gzip or deflate"). Its body is text/plain there, JSON here.
    assert (response.status_code, response.json()) == (
        501,
        {"error": "Unsupported compression type"},
    )
    assert response.headers["Accept-Encoding"] == "gzip, deflate"
    # Codings are case-insensitive (RFC 9110 §8.4.1): Triton refuses `GZIP` with that 501,
    # Thaw takes it (kept).
    gzipped = requests.post(
        f"{url}/v2/models/add_sub/infer",
        data=gzip.compress(body),
        headers={"Content-Encoding": "GZIP"},
        timeout=30,
    )
    assert gzipped.status_code == 200


# -- names that are no model names ----------------------------------------------------------


@pytest.mark.parametrize(("segment", "name"), [("a%20b", "a b"), ("..%2Fx", "../x"), (".x", ".x")])
def test_a_name_that_is_no_model_name_is_an_unknown_model_in_tritons_words(
    url: str, segment: str, name: str
) -> None:
    # Triton 2.51: 404 "Request for unknown model: '<name>' is not found" (Thaw said "invalid
    # model name '<name>'"; thaw up's activator already used Triton's words). Triton echoes
    # the name as sent (`a%20b`); Thaw decodes the path first (RFC 3986), so echoes `a b`.
    for path in (f"/v2/models/{segment}", f"/v2/models/{segment}/config"):
        response = requests.get(url + path, timeout=30)
        expected = {"error": f"Request for unknown model: '{name}' is not found"}
        assert (response.status_code, response.json()) == (404, expected)


def test_grpc_names_no_model_name_as_an_unknown_model(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    for name in ("a/b", ".."):
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelMetadata(service_pb2.ModelMetadataRequest(name=name), timeout=30)
        assert (info.value.code(), info.value.details()) == (
            grpc.StatusCode.NOT_FOUND,
            f"Request for unknown model: '{name}' is not found",
        )


def _exchange(server: ServeProcess, data: bytes) -> bytes:
    """Everything the server answers to `data` on one connection it closes after."""
    host, port = server.hostport.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(data)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_an_expectation_other_than_100_continue_is_ignored(server: ServeProcess) -> None:
    body = json.dumps({"inputs": _ADD_SUB_INPUTS}).encode()
    head = (
        "POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n"
    )
    # Triton 2.51 serves it; Thaw answered aiohttp's 417 "Unknown Expect: 200-ok" in
    # text/plain. 100-continue still gets its interim answer first.
    ignored = _exchange(server, f"{head}Expect: 200-ok\r\n\r\n".encode() + body)
    assert ignored.startswith(b"HTTP/1.1 200 OK\r\n")
    continued = _exchange(server, f"{head}Expect: 100-continue\r\n\r\n".encode() + body)
    assert continued.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
