"""Hostile requests to a real `thaw serve`: each gets its JSON error and the server lives on."""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.serve_process import ServeProcess, raw_answer
from tests.integration.runtime.server_limits import BODY_TIMEOUT_S, MAX_BODY_BYTES

pytestmark = pytest.mark.integration

ADD_SUB = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
    ]
}


def _request(
    server: ServeProcess,
    method: str,
    path: str,
    body: bytes | Iterator[bytes] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    host, port = server.hostport.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        chunked = body is not None and not isinstance(body, bytes)
        conn.request(method, path, body=body, headers=headers or {}, encode_chunked=chunked)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def _error(
    server: ServeProcess, status: int, method: str, path: str, body=None, headers=None
) -> str:  # type: ignore[no-untyped-def]
    got, headers_out, raw = _request(server, method, path, body, headers)
    assert got == status, raw[:300]
    assert headers_out["Content-Type"].startswith("application/json")
    doc = json.loads(raw)
    assert list(doc) == ["error"] and doc["error"]
    return str(doc["error"])


@pytest.fixture(autouse=True)
def _still_serving(runtime_server: ServeProcess) -> Iterator[None]:
    """After every hostile request the server still answers a good one."""
    yield
    status, _, raw = _request(
        runtime_server, "POST", "/v2/models/add_sub/infer", json.dumps(ADD_SUB).encode()
    )
    assert status == 200, raw
    assert json.loads(raw)["outputs"][0]["data"] == [2.0, 3.0, 4.0, 5.0]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v2/models/no_such_model", 404),
        ("GET", "/v2/models/no_such_model/ready", 404),
        ("POST", "/v2/models/no_such_model/infer", 404),
        ("GET", "/v2/models/add_sub/versions/99", 404),
        ("GET", "/v2/nothing/here", 404),
        ("GET", "/v2/models/add_sub/infer", 405),
        ("PUT", "/v2/repository/index", 405),
        ("GET", "/v2/models/..%2F..%2Fetc%2Fpasswd", 404),
        ("GET", "/v2/models/%2e%2e/config", 404),
        ("POST", "/v2/repository/models/..%2Fescape/load", 404),
        ("GET", "/v2/models/add_sub%00x/ready", 404),
        ("GET", "/v2/models/add_sub%0A/ready", 404),
        ("GET", "/v2/models/%24(reboot)/ready", 404),
        ("GET", "/v2/models/" + "a" * 5000, 404),
        ("GET", "/v2/models/add_sub/versions/-1/ready", 404),
    ],
)
def test_unknown_routes_models_and_bad_names(
    runtime_server: ServeProcess, method: str, path: str, status: int
) -> None:
    _error(runtime_server, status, method, path)


def test_body_over_the_cap_is_413(runtime_server: ServeProcess) -> None:
    big = b" " * (MAX_BODY_BYTES + 1)
    assert "limit" in _error(runtime_server, 413, "POST", "/v2/models/add_sub/infer", big)


def test_chunked_body_over_the_cap_is_413(runtime_server: ServeProcess) -> None:
    chunks = (b"x" * 65536 for _ in range(MAX_BODY_BYTES // 65536 + 4))
    _error(runtime_server, 413, "POST", "/v2/models/add_sub/infer", chunks)


def test_gzip_bomb_is_413(runtime_server: ServeProcess) -> None:
    bomb = gzip.compress(b" " * (64 * MAX_BODY_BYTES), compresslevel=9)
    assert len(bomb) < MAX_BODY_BYTES
    _error(
        runtime_server, 413, "POST", "/v2/models/add_sub/infer", bomb, {"Content-Encoding": "gzip"}
    )


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"",
        b"[]",
        b'{"inputs": "x"}',
        '{"inputs": ["\u00e9"]}'.encode("latin-1"),
        b"[" * 50_000 + b"]" * 50_000,
    ],
)
def test_malformed_json_is_400(runtime_server: ServeProcess, body: bytes) -> None:
    _error(runtime_server, 400, "POST", "/v2/models/add_sub/infer", body)


@pytest.mark.parametrize(
    "shape", [[2**62, 2**62], [2**31, 2**31, 2**31, 2**31], [-4], [4, -1], [1e30]]
)
def test_shape_overflow_is_400(runtime_server: ServeProcess, shape: list) -> None:  # type: ignore[type-arg]
    doc = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": shape, "data": [1.0]}]}
    _error(runtime_server, 400, "POST", "/v2/models/add_sub/infer", json.dumps(doc).encode())
    doc["inputs"][0].pop("data")
    doc["inputs"][0]["parameters"] = {"binary_data_size": 16}
    header = json.dumps(doc).encode()
    _error(
        runtime_server,
        400,
        "POST",
        "/v2/models/add_sub/infer",
        header + bytes(16),
        {"Inference-Header-Content-Length": str(len(header))},
    )


@pytest.mark.parametrize(
    ("declared", "actual", "header_delta"),
    [(16, 12, 0), (12, 16, 0), (16, 20, 0), (16, 16, 5), (16, 16, -3)],
)
def test_binary_sections_that_lie_are_400(
    runtime_server: ServeProcess, declared: int, actual: int, header_delta: int
) -> None:
    doc = {
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": "FP32",
                "shape": [4],
                "parameters": {"binary_data_size": declared},
            },
            {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
        ]
    }
    header = json.dumps(doc).encode()
    _error(
        runtime_server,
        400,
        "POST",
        "/v2/models/add_sub/infer",
        header + bytes(actual),
        {"Inference-Header-Content-Length": str(len(header) + header_delta)},
    )


def test_wrong_inputs_for_the_model_are_400(client: httpclient.InferenceServerClient) -> None:
    tensor = httpclient.InferInput("NOPE", [4], "FP32")
    tensor.set_data_from_numpy(np.zeros(4, dtype=np.float32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("add_sub", [tensor])
    assert info.value.status() == "400"


def test_model_that_raises_fails_only_its_request(client: httpclient.InferenceServerClient) -> None:
    tensor = httpclient.InferInput("INPUT0", [2], "FP32")
    tensor.set_data_from_numpy(np.zeros(2, dtype=np.float32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("execute_error", [tensor])
    assert info.value.status() == "500"
    assert "always fails" in str(info.value.message())
    assert client.is_server_ready()


def test_bad_content_encoding_is_refused(runtime_server: ServeProcess) -> None:
    body = json.dumps(ADD_SUB).encode()
    # An unsupported coding is Triton's 501 (test_triton_parity_framing.py); a corrupt one 400.
    _error(
        runtime_server, 501, "POST", "/v2/models/add_sub/infer", body, {"Content-Encoding": "br"}
    )
    _error(
        runtime_server, 400, "POST", "/v2/models/add_sub/infer", body, {"Content-Encoding": "gzip"}
    )


def test_body_that_never_arrives_times_out_with_408(runtime_server: ServeProcess) -> None:
    """408 Request Timeout, as `thaw up` answers (docs/decisions/0017-body-deadline-status.md)."""
    started = time.monotonic()
    reply = raw_answer(
        runtime_server.hostport,
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
        b"Content-Length: 1000\r\n\r\n" + b'{"inputs": [',
    )
    elapsed = time.monotonic() - started
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"did not arrive within" in reply
    # uvloop's timers have millisecond resolution: the deadline may fire up to 1 ms early
    # (seen once beside a second `make test`: 1.99984 s of 2).
    assert BODY_TIMEOUT_S - 0.01 <= elapsed < BODY_TIMEOUT_S + 10


def test_a_client_gone_before_its_body_is_in_is_no_server_error(
    runtime_server: ServeProcess,
) -> None:
    """A client that closes its connection halfway through its body leaves no "unexpected
    error" (a traceback at ERROR, a 500) in the server's log: nobody is left to answer, and it
    was the client's doing. The native front's soak found each such request (its
    `partial_body_abandoned` case, through either front) logged as the server's fault."""
    before = runtime_server.logs().count("unexpected error")
    host, port = runtime_server.hostport.rsplit(":", 1)
    for _ in range(3):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                b'{"inputs": ['
            )
            time.sleep(0.3)  # the server (or the front) has the head and starts the body
    time.sleep(1.0)  # each connection's loss has reached the handler reading its body
    assert runtime_server.logs().count("unexpected error") == before, runtime_server.logs()[-3000:]


@pytest.mark.parametrize(
    "raw",
    [
        b"GARBAGE\r\n\r\n",
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
        b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"zz\r\n",
    ],
    ids=["request-line", "content-length", "header-too-long", "chunk-size"],
)
def test_malformed_http_framing_gets_a_json_400(runtime_server: ServeProcess, raw: bytes) -> None:
    answer = raw_answer(runtime_server.hostport, raw)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1].startswith(b"4"), head[:80]
    assert b"application/json" in head
    assert "error" in json.loads(body)
    status, _, _ = _request(runtime_server, "GET", "/v2/health/live")
    assert status == 200
