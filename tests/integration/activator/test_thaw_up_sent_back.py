"""Requests a replica sends back to `thaw up`'s front door, on a client connection handed to it:
one answered there slower than the head deadline is not taken for a client that never sent its
head (it was a 408 at the deadline), and the unload of the replica's own model answers at once
(it waited for a drain that waited for the very connection carrying it, then 408)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import pytest

from tests.fixtures.models import make_add_sub, make_slow_execute
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration

HEAD_TIMEOUT_S = 1
SLOW_S = 3 * HEAD_TIMEOUT_S  # a sent-back request well past the head deadline


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("up_sent_back")
    make_add_sub(repo)
    make_slow_execute(repo, "slow", delay_s=SLOW_S)
    server = UpProcess(
        repo, "--warm-pool", "1", "--preload-frameworks", "", "--no-image-build",
        "--head-timeout-s", str(HEAD_TIMEOUT_S), "--model-control-mode", "explicit",
        "--load-model", "add_sub", "--load-model", "slow",
    )  # fmt: skip
    yield server
    server.stop()


def _handed_off(up: UpProcess) -> float:
    for line in up.metrics().splitlines():
        if line.startswith('thaw_handoffs_total{model="add_sub",result="handed_off"}'):
            return float(line.split()[-1])
    return 0.0


def _request(
    conn: http.client.HTTPConnection, method: str, path: str, body: object = None
) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, response.read()


def _direct_connection(up: UpProcess) -> http.client.HTTPConnection:
    """A connection whose first request is for warm add_sub: handed to its replica."""
    host, port = up.hostport.split(":")
    warm = http.client.HTTPConnection(host, int(port), timeout=120)
    body = {"inputs": [{"name": n, "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}
                       for n in ("INPUT0", "INPUT1")]}  # fmt: skip
    assert _request(warm, "POST", "/v2/models/add_sub/infer", body)[0] == 200  # wakes it
    warm.close()
    up.wait_for(lambda: up.model("add_sub")["replicas_ready"] >= 1, 60, "add_sub warm")
    before = _handed_off(up)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    assert _request(conn, "GET", "/v2/models/add_sub/ready")[0] == 200
    up.wait_for(lambda: _handed_off(up) == before + 1, 30, "the connection handed off")
    return conn


def _slow_body() -> dict[str, object]:
    return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}]}


def test_a_sent_back_request_slower_than_the_head_deadline_is_answered(up: UpProcess) -> None:
    conn = _direct_connection(up)
    try:  # `slow` is another model's: this replica sends the request back to the front door
        status, body = _request(conn, "POST", "/v2/models/slow/infer", _slow_body())
        assert status == 200, body
        assert _request(conn, "GET", "/v2/models/add_sub/ready")[0] == 200  # still open
    finally:
        conn.close()


def test_unloading_the_replicas_own_model_over_its_connection_answers_at_once(
    up: UpProcess,
) -> None:
    conn = _direct_connection(up)
    try:
        status, body = _request(conn, "POST", "/v2/repository/models/add_sub/unload", {})
        assert status == 200, body
        # Refused from now on, on this connection too (Triton's unloaded model: not ready).
        assert _request(conn, "GET", "/v2/models/add_sub/ready")[0] != 200
    finally:
        conn.close()
    up.wait_for(lambda: up.model("add_sub")["replicas_ready"] == 0, 60, "add_sub drained")
