"""Raw binary requests (`Inference-Header-Content-Length: 0`) through `thaw up`, unchanged.

The activator never parses tensors: a raw body must reach the replica byte for byte, whether
it is held while the model wakes, proxied in the data path, or sent on a connection handed off
to the replica, and chunked or not. Real `thaw up`, real replicas, raw HTTP.
"""

from __future__ import annotations

import http.client
import json
import re
import struct
from collections.abc import Iterator

import numpy as np
import pytest

from tests.fixtures.models import make_add_sub
from tests.fixtures.onnx_models import make_onnx_identity
from tests.fixtures.up_process import UpProcess, with_params

pytestmark = pytest.mark.integration

RAW = {"Inference-Header-Content-Length": "0"}


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("raw_repo")
    make_onnx_identity(repo, "raw_direct")
    with_params(make_onnx_identity(repo, "raw_inpath"), direct_connections="false")
    make_add_sub(repo)
    server = UpProcess(
        repo,
        "--warm-pool", "1",
        "--preload-frameworks", "onnxruntime",
        "--no-image-build",
        "--cache", str(repo.parent / "cache"),
    )  # fmt: skip
    yield server
    server.stop()


def _handoffs(up: UpProcess, model: str) -> float:
    pattern = rf'thaw_handoffs_total{{model="{model}",result="handed_off"}} (\S+)'
    match = re.search(pattern, up.metrics())
    return float(match.group(1)) if match else 0.0


def _post_raw(
    up: UpProcess, model: str, body: bytes, *, chunked: bool = False
) -> tuple[int, dict[str, str], bytes]:
    """One raw request on a new connection: status, headers, body."""
    conn = http.client.HTTPConnection(up.hostport, timeout=60)
    try:
        path = f"/v2/models/{model}/infer"
        if chunked:
            halves = iter([body[: len(body) // 2], body[len(body) // 2 :]])
            conn.request("POST", path, halves, headers=RAW, encode_chunked=True)
        else:
            conn.request("POST", path, body, headers=RAW)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def _output(status: int, headers: dict[str, str], content: bytes) -> bytes:
    assert status == 200, content
    header_length = int(headers["Inference-Header-Content-Length"])
    header = json.loads(content[:header_length])
    assert header["outputs"][0]["parameters"]["binary_data_size"] == len(content) - header_length
    return content[header_length:]


def test_a_raw_body_wakes_the_model_and_then_goes_direct_byte_for_byte(up: UpProcess) -> None:
    assert up.model("raw_direct")["state"] == "cold"
    values = np.arange(16, dtype=np.float32).tobytes()
    assert _output(*_post_raw(up, "raw_direct", values)) == values  # held, then proxied
    up.wait_for(lambda: up.model("raw_direct")["state"] == "warm", 30, "raw_direct warm")
    before = _handoffs(up, "raw_direct")
    for chunked in (False, True):
        assert _output(*_post_raw(up, "raw_direct", values, chunked=chunked)) == values
    assert _handoffs(up, "raw_direct") >= before + 2  # each new connection went to the replica


def test_a_raw_body_through_the_in_path_proxy_arrives_unchanged(up: UpProcess) -> None:
    values = np.random.default_rng(0).random(1000, dtype=np.float32).tobytes()
    for chunked in (False, True):
        assert _output(*_post_raw(up, "raw_inpath", values, chunked=chunked)) == values
    assert _handoffs(up, "raw_inpath") == 0


def test_a_raw_body_the_model_cannot_take_gets_the_replicas_answer(up: UpProcess) -> None:
    status, _, content = _post_raw(up, "add_sub", struct.pack("<4f", 1, 2, 3, 4))
    assert status == 400
    assert json.loads(content)["error"] == (
        "Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in "
        "'add_sub' model configuration"
    )
