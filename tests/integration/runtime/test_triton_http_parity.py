"""`thaw serve` answers the requests of Triton's L0_http tests as Triton does, over real HTTP.

The models are shaped like the ones Triton's `qa/L0_http/test.sh` builds (identity models named
`onnx_zero_<n>_<dtype>`, tests/fixtures/triton_qa_models.py); the requests and the expected
texts are those Triton's `http_test.py` (v2.51.0 and main) pins, restated here so that these
tests need no copy of Triton. Where Thaw answers with another status on purpose (400 where
Triton says 500, 413 where it says 400), the test checks Thaw's status and Triton's text;
docs/triton-http-parity.md lists each difference and why.
"""

from __future__ import annotations

import base64
import gzip
import json
import socket
import struct
import time
from collections.abc import Iterator

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from tests.fixtures.serve_process import ServeProcess
from tests.fixtures.triton_qa_models import build_http_test_repo

pytestmark = pytest.mark.integration

MAX_BODY_BYTES = 1024 * 1024
RAW = {"Inference-Header-Content-Length": "0"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = build_http_test_repo(tmp_path_factory.mktemp("l0_http"), with_main_models=True)
    args = ["--model-control-mode", "explicit", "--load-model", "*"]
    proc = ServeProcess(repo, *args, "--max-body-bytes", str(MAX_BODY_BYTES))
    try:
        proc.wait_ready()
        yield proc
    finally:
        rc = proc.stop()
    logs = proc.log_path.read_text(errors="replace")
    assert rc == 0, logs
    assert "unexpected error" not in logs, logs  # no request reached an unhandled exception


def _infer_url(server: ServeProcess, model: str) -> str:
    return f"{server.url}/v2/models/{model}/infer"


def _raw_output(response: requests.Response) -> tuple[dict, bytes]:
    """The JSON header and the binary output bytes of a raw request's answer."""
    assert response.status_code == 200, response.text
    header_length = int(response.headers["Inference-Header-Content-Length"])
    return json.loads(response.content[:header_length]), response.content[header_length:]


def _error(response: requests.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    return str(response.json()["error"])


@pytest.mark.parametrize("count", [8, 32])
def test_a_raw_body_is_the_one_input_and_comes_back_binary(
    server: ServeProcess, count: int
) -> None:
    values = np.arange(count, dtype=np.float32)
    response = requests.post(
        _infer_url(server, "onnx_zero_1_float32"), data=values.tobytes(), headers=RAW
    )
    header, output = _raw_output(response)
    assert output == values.tobytes()
    [meta] = header["outputs"]
    assert meta["shape"] == [1, count]  # batch dim 1, the variable dim from the body's size
    assert meta["parameters"] == {"binary_data_size": 4 * count}


def test_a_raw_bytes_input_is_one_element_and_comes_back_length_prefixed(
    server: ServeProcess,
) -> None:
    response = requests.post(
        _infer_url(server, "onnx_zero_1_object_1_element"), data="427", headers=RAW
    )
    _, output = _raw_output(response)
    assert output == struct.pack("<I", 3) + b"427"


def test_a_raw_body_may_be_chunked_or_compressed(server: ServeProcess) -> None:
    values = np.arange(8, dtype=np.float32).tobytes()
    url = _infer_url(server, "onnx_zero_1_float32")
    chunked = requests.post(url, data=iter([values[:12], values[12:]]), headers=RAW)
    assert _raw_output(chunked)[1] == values
    gzipped = requests.post(
        url, data=gzip.compress(values), headers={**RAW, "Content-Encoding": "gzip"}
    )
    assert _raw_output(gzipped)[1] == values


@pytest.mark.parametrize(
    ("model", "body", "message"),
    [
        (
            "onnx_zero_3_float32",
            np.arange(24, dtype=np.float32).tobytes(),
            "Raw request must only have 1 input (found 1) to be deduced but got 3 inputs in "
            "'onnx_zero_3_float32' model configuration",
        ),
        (
            "onnx_zero_1_float16",
            np.ones([2, 2], dtype=np.float16).tobytes(),
            "The shape of the raw input 'INPUT0' can not be deduced because there are more "
            "than one variable-sized dimension",
        ),
        (
            "onnx_zero_1_object",
            b"427",
            "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]",
        ),
        (
            "onnx_zero_1_float32",
            b"\0" * 7,
            "input byte size mismatch for input 'INPUT0' for model 'onnx_zero_1_float32'. "
            "Expected 4, got 7",
        ),
    ],
)
def test_a_raw_body_that_cannot_be_deduced_is_400_in_tritons_words(
    server: ServeProcess, model: str, body: bytes, message: str
) -> None:
    response = requests.post(_infer_url(server, model), data=body, headers=RAW)
    assert message in _error(response, 400)


def test_a_raw_body_for_an_unknown_model_is_404(server: ServeProcess) -> None:
    response = requests.post(_infer_url(server, "no_such_model"), data=b"\0" * 4, headers=RAW)
    _error(response, 404)


@pytest.mark.parametrize("cuts", [(), ("head",), ("head", 20), (40,), ("head", "body")])
def test_content_length_beside_transfer_encoding_is_framed_by_chunked(
    server: ServeProcess, cuts: tuple[str | int, ...]
) -> None:
    """As Triton frames it (L0_http test_content_encoding_chunked_manually): by
    Transfer-Encoding; the connection is closed after the answer. However the bytes arrive:
    `requests` writes the head and the body apart, so a loaded server reads them apart
    (here each piece is sent on its own, a pause between: the subject of the test)."""
    payload = np.arange(8, dtype=np.float32).tobytes()
    body = f"{len(payload):X}\r\n".encode() + payload + b"\r\n0\r\n\r\n"
    host, port = server.hostport.split(":")
    head = (
        "POST /v2/models/onnx_zero_1_float32/infer HTTP/1.1\r\n"
        f"Host: {host}\r\nInference-Header-Content-Length: 0\r\n"
        f"Transfer-Encoding: chunked\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    data = head.encode() + body
    at = {"head": len(head), "body": len(head) + len(body) - 5}
    points = sorted(c if isinstance(c, int) else at[c] for c in cuts)
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for index, piece in enumerate(pieces):
            if index:
                time.sleep(0.05)
            sock.sendall(piece)
        answer = b""
        while chunk := sock.recv(65536):  # to the server's close
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.split()[1] == b"200", answer[:300]
    headers, _, content = rest.partition(b"\r\n\r\n")
    assert b"Connection: close" in headers
    assert content.endswith(payload)  # the raw input echoed as the raw output


@pytest.mark.parametrize(
    ("model", "datatype", "value"),
    [("simple_identity", "BYTES", "hello"), ("simple_identity_int64", "INT64", 123)],
)
def test_data_nested_past_100_levels_is_refused_in_tritons_words(
    server: ServeProcess, model: str, datatype: str, value: object
) -> None:
    def request(depth: int) -> requests.Response:
        data: object = value
        for _ in range(depth):
            data = [data]
        body = {"inputs": [{"name": "INPUT0", "datatype": datatype, "shape": [1, 1], "data": data}]}
        return requests.post(_infer_url(server, model), json=body)

    ok = request(50)
    assert ok.status_code == 200, ok.text
    assert ok.json()["outputs"][0]["data"] == [value]
    message = _error(request(120), 400)
    assert message == "JSON nesting depth exceeds maximum allowed limit (100)"


def _fp32_input(shape: list[int], data: list[float]) -> dict:
    return {"name": "INPUT0", "datatype": "FP32", "shape": shape, "data": data}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"inputs": [_fp32_input([1, 8], [0.0] * 8)], "outputs": [{"name": "OUTPUT0"}] * 2},
            "output 'OUTPUT0' already exists in request",
        ),
        (
            {"inputs": [_fp32_input([2**4, 2**60 + 2], [1.0])]},
            "causes total element count to exceed maximum size of 9223372036854775807",
        ),
        ({"inputs": [_fp32_input([2**2, 2**60 + 2], [1.0])]}, "byte size overflow for input"),
        # Triton answers 500 here; the text is its own.
        (
            {"inputs": [_fp32_input([2, -5], [1.0])]},
            "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer",
        ),
    ],
)
def test_bad_json_requests_get_tritons_texts(
    server: ServeProcess, body: dict, message: str
) -> None:
    response = requests.post(_infer_url(server, "onnx_zero_1_float32"), json=body)
    assert message in _error(response, 400)
    assert requests.get(f"{server.url}/v2/health/live").status_code == 200


def test_a_header_length_past_any_body_is_400(server: ServeProcess) -> None:
    response = requests.post(
        _infer_url(server, "onnx_zero_1_float32"),
        json={"inputs": []},
        headers={"Inference-Header-Content-Length": "99999999999"},
    )
    _error(response, 400)


def _load(server: ServeProcess, model: str, parameters: dict) -> requests.Response:
    url = f"{server.url}/v2/repository/models/{model}/load"
    return requests.post(url, json={"parameters": parameters}, timeout=60)


def test_load_files_that_cannot_be_written_are_400_and_the_model_keeps_serving(
    server: ServeProcess,
) -> None:
    # A path component past NAME_MAX (Triton: 500, the same text, and the server survives).
    long_name = _load(server, "onnx_zero_1_float32", {"file:" + "A" * 256: "YQ==", "config": "{}"})
    message = _error(long_name, 400)
    assert message.startswith(
        "failed to load 'onnx_zero_1_float32', failed to poll from model repository"
    )
    assert "256 bytes" in message
    # A file where another path needs a directory: found only while writing.
    onnx = (server.repo / "onnx_zero_1_float32" / "1" / "model.onnx").read_bytes()
    encoded = base64.b64encode(onnx).decode()
    files = {"file:1": encoded, "file:1/model.onnx": encoded}
    clash = _load(server, "onnx_zero_1_float32", {"config": "{}", **files})
    assert "cannot be written" in _error(clash, 400)
    assert requests.get(f"{server.url}/v2/health/ready").status_code == 200
    client = httpclient.InferenceServerClient(server.hostport)
    try:
        tensor = httpclient.InferInput("INPUT0", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.array([[1.0, 2.0]], dtype=np.float32))
        result = client.infer("onnx_zero_1_float32", [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [[1.0, 2.0]])
    finally:
        client.close()


def test_a_model_file_name_too_long_for_the_disk_is_400(server: ServeProcess) -> None:
    config = json.dumps({"backend": "onnxruntime", "default_model_filename": "A" * 300})
    response = _load(server, "onnx_zero_1_float32", {"config": config})
    assert "cannot be read: File name too long" in _error(response, 400)
    assert requests.get(f"{server.url}/v2/models/onnx_zero_1_float32/ready").status_code == 200


def test_repository_index_ready_nested_deep_is_no_boolean(server: ServeProcess) -> None:
    depth = 250_000
    body = '{"ready":' + "[" * depth + "true" + "]" * depth + "}"
    response = requests.post(f"{server.url}/v2/repository/index", data=body, timeout=60)
    assert _error(response, 400) == "Invalid value for 'ready': expected a boolean"
    assert requests.get(f"{server.url}/v2/health/live").status_code == 200


def test_a_load_body_over_the_cap_is_413_in_tritons_words(server: ServeProcess) -> None:
    payload = base64.b64encode(b"A" * MAX_BODY_BYTES).decode()
    body = json.dumps({"parameters": {"config": "{}", "file:1/model.onnx": payload}})
    response = requests.post(
        f"{server.url}/v2/repository/models/invalid_onnx/load", data=body, timeout=60
    )
    message = _error(response, 413)
    assert message.startswith(f"request JSON size of {len(body)} bytes")
    assert f" exceeds the maximum allowed input size of {MAX_BODY_BYTES} bytes" in message


def test_a_second_request_to_a_one_place_queue_is_503_as_in_triton(server: ServeProcess) -> None:
    """`test_descriptive_status_code`: the queue model holds a request up to 1 s for company
    and queues one at most, so a second request, while the first waits, is refused at once."""
    import threading
    import time

    from tests.support.scheduling_client import metric

    url = _infer_url(server, "onnx_zero_1_float32_queue")
    body = np.arange(8, dtype=np.float32).tobytes()
    first: list[tuple[requests.Response, float]] = []
    thread = threading.Thread(
        target=lambda: first.append((requests.post(url, data=body, headers=RAW), time.monotonic()))
    )
    thread.start()
    deadline = time.monotonic() + 30
    model = "onnx_zero_1_float32_queue"
    while metric(server.url, "nv_inference_pending_request_count", model=model) < 1:
        assert time.monotonic() < deadline and thread.is_alive(), "the first never queued"
        time.sleep(0.01)
    second = requests.post(url, data=body, headers=RAW)
    refused_at = time.monotonic()
    assert "Exceeds maximum queue size" in _error(second, 503)
    thread.join(10)
    answer, answered_at = first[0]
    assert _raw_output(answer)[1] == body
    assert refused_at < answered_at  # at once, not after the first one's delay
