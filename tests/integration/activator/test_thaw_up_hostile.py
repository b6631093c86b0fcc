"""`thaw up` as a user meets it: the v2 surface next to a direct `thaw serve`, hostile input,
broken repositories, bad flags, and what is left behind when it is stopped or killed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from tests.fakes.loop import HUNG_AFTER_S
from tests.fixtures.up_process import UpProcess, pid_alive
from tests.integration.activator.serve_beside import ServeBeside
from tests.integration.activator.up_limits import MAX_BODY_BYTES, hold_file

pytestmark = pytest.mark.integration

_ADD_SUB_JSON = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
    ]
}


def _answer(method: str, url: str, **kw: Any) -> tuple[int, Any]:
    r = requests.request(method, url, timeout=60, **kw)
    return r.status_code, (r.json() if r.content else None)


def _error(r: requests.Response) -> str:
    assert r.headers["Content-Type"].startswith("application/json"), r.headers
    body = r.json()
    assert set(body) == {"error"} and isinstance(body["error"], str), body
    return str(body["error"])


# ---- the v2 surface next to `thaw serve` --------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/v2",
        "/v2/health/live",
        "/v2/models/add_sub",
        "/v2/models/add_sub/versions/1",
        "/v2/models/add_sub/config",
        "/v2/models/add_sub/versions/1/config",
        "/v2/models/onnx_add",
        "/v2/models/onnx_add/config",
        "/v2/models/add_sub/ready",
        "/v2/models/add_sub/versions/1/ready",
        "/v2/models/add_sub/versions/9/ready",  # a version not served: not ready, not unknown
        "/v2/models/add_sub/versions/x/ready",  # not a version: not found, as Triton routes it
        "/v2/models/add_sub/versions/-1/config",
        "/v2/models/add_sub/versions/99999999999999999999",  # Triton's stol refusal, 400
        "/v2/models/add_sub/versions/01",  # version 1, as Triton reads it
        "/v2/models/add_sub/versions/01/config",
        "/v2/models/add_sub/versions/01/ready",
    ],
)
def test_metadata_config_and_health_match_thaw_serve(
    up: UpProcess, serve: ServeBeside, path: str
) -> None:
    assert _answer("GET", up.url + path) == _answer("GET", serve.url + path)


def test_an_unsupported_body_coding_is_tritons_501_through_thaw_up(
    up: UpProcess, serve: ServeBeside
) -> None:
    body = json.dumps(_ADD_SUB_JSON).encode()
    for base in (up.url, serve.url):
        r = requests.post(
            base + "/v2/models/add_sub/infer",
            data=body,
            headers={"Content-Encoding": "br"},
            timeout=60,
        )
        assert (r.status_code, _error(r)) == (501, "Unsupported compression type"), base
        assert r.headers["Accept-Encoding"] == "gzip, deflate"


def test_an_unknown_expectation_is_ignored_through_thaw_up(
    up: UpProcess, serve: ServeBeside
) -> None:
    # Triton 2.51 ignores an Expect other than 100-continue (Thaw answered a text/plain 417).
    body = json.dumps(_ADD_SUB_JSON).encode()
    for base in (up.url, serve.url):
        host, port = base.removeprefix("http://").rsplit(":", 1)
        head = (
            f"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
            f"Expect: 200-ok\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        with socket.create_connection((host, int(port)), timeout=60) as conn:
            conn.sendall(head.encode() + body)
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), (base, answer[:200])


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v2/models/nope", 404),
        ("GET", "/v2/models/nope/ready", 404),
        ("GET", "/v2/models/add_sub/versions/9", 404),
        ("POST", "/v2/models/nope/infer", 404),
        ("POST", "/v2/models/add_sub/versions/9/infer", 404),
        ("GET", "/v2/models/add_sub/infer", 405),
        ("PUT", "/v2/models/add_sub", 405),
        ("DELETE", "/v2/health/live", 405),
        ("GET", "/v2/repository/index", 405),
        ("GET", "/nope", 404),
    ],
)
def test_error_status_codes_match_thaw_serve(
    up: UpProcess, serve: ServeBeside, method: str, path: str, status: int
) -> None:
    for base in (up.url, serve.url):
        r = requests.request(method, base + path, json=_ADD_SUB_JSON, timeout=60)
        assert r.status_code == status, (base, r.text)
        _error(r)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/nope", {"error": "Not Found"}),
        ("GET", "/v2/models", {"error": "Not Found"}),
        ("POST", "/v2", {"error": "Method Not Allowed"}),
        ("PUT", "/v2/models/add_sub/infer", {"error": "Method Not Allowed"}),
    ],
)
def test_unknown_routes_and_methods_get_tritons_bodies_on_both(
    up: UpProcess, serve: ServeBeside, method: str, path: str, body: dict[str, str]
) -> None:
    # tritonserver 2.51's bodies; thaw up said "no route for '/nope'" (stop 50's side by side).
    for base in (up.url, serve.url):
        assert requests.request(method, base + path, timeout=60).json() == body, base


def test_inference_json_binary_and_versioned_match_thaw_serve(
    up: UpProcess, serve: ServeBeside
) -> None:
    for path in ("/v2/models/add_sub/infer", "/v2/models/add_sub/versions/1/infer"):
        assert _answer("POST", up.url + path, json=_ADD_SUB_JSON) == _answer(
            "POST", serve.url + path, json=_ADD_SUB_JSON
        )
    results = []
    for base in (up.hostport, serve.url.removeprefix("http://")):
        client = httpclient.InferenceServerClient(base)
        a, b = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
        inputs = []
        for name, value in (("INPUT0", a), ("INPUT1", b)):
            tensor = httpclient.InferInput(name, [4], "FP32")
            tensor.set_data_from_numpy(value, binary_data=True)
            inputs.append(tensor)
        outputs = [
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
        ]
        result = client.infer("add_sub", inputs, outputs=outputs, model_version="1", request_id="q")
        results.append((result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")))
        assert result.get_response()["id"] == "q"
        assert client.is_model_ready("add_sub") and client.is_server_live()
        client.close()
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_repository_index_matches_thaw_serve_for_servable_models(
    up: UpProcess, serve: ServeBeside
) -> None:
    names = {"add_sub", "onnx_add", "overflow", "slow"}
    rows = {}
    for base in (up.url, serve.url):
        index = requests.post(f"{base}/v2/repository/index", timeout=60).json()
        rows[base] = [r for r in index if r["name"] in names]
    assert rows[up.url] == rows[serve.url]
    ready = requests.post(f"{up.url}/v2/repository/index", json={"ready": True}, timeout=60)
    assert {r["state"] for r in ready.json()} == {"READY"}
    bad = requests.post(f"{up.url}/v2/repository/index", json={"ready": "yes"}, timeout=60)
    assert bad.status_code == 400 and "ready" in _error(bad)


def test_statistics_have_the_replicas_shape_at_zero(up: UpProcess, serve: ServeBeside) -> None:
    mine = requests.get(f"{up.url}/v2/models/overflow/stats", timeout=60).json()
    theirs = requests.get(f"{serve.url}/v2/models/overflow/stats", timeout=60).json()
    assert set(mine["model_stats"][0]) == set(theirs["model_stats"][0])
    assert set(mine["model_stats"][0]["inference_stats"]) == set(
        theirs["model_stats"][0]["inference_stats"]
    )


def test_load_and_unload_through_tritonclient(up: UpProcess) -> None:
    client = httpclient.InferenceServerClient(up.hostport)
    try:
        client.load_model("add_sub")
        assert up.model("add_sub")["replicas_ready"] >= 1
        # A config override that names no inputs: the replica's add_sub refuses it, as
        # Triton's would; the load fails in Triton's words and the old add_sub serves on.
        with pytest.raises(
            httpclient.InferenceServerException, match="load failed for model 'add_sub'"
        ):
            client.load_model("add_sub", config='{"max_batch_size": 2}')
        assert client.get_model_config("add_sub")["max_batch_size"] == 0
        assert client.is_model_ready("add_sub")
        # thaw serve's words: a load re-reads the repository, which has no such model
        with pytest.raises(httpclient.InferenceServerException, match="no such model"):
            client.load_model("nope")
        client.unload_model("add_sub")
        assert up.model("add_sub")["replicas_ready"] == 0
        # Unloaded: not ready, refused in Triton's words (404), nothing woken, until a load
        assert not client.is_model_ready("add_sub")
        r = requests.post(f"{up.url}/v2/models/add_sub/infer", json=_ADD_SUB_JSON, timeout=60)
        assert r.status_code == 404, r.text
        assert _error(r) == "Request for unknown model: 'add_sub' has no available versions"
        assert up.model("add_sub")["replicas_ready"] == 0
        client.load_model("add_sub")
        assert client.is_model_ready("add_sub")
    finally:
        client.load_model("add_sub")  # loaded again for the session's other tests
        client.close()


# ---- a repository with a broken model and stray files ---------------------------------------


def test_broken_config_is_unavailable_with_its_reason_and_the_rest_is_served(
    up: UpProcess,
) -> None:
    for method, path in [
        ("GET", "/v2/models/badcfg"),
        ("GET", "/v2/models/badcfg/ready"),
        ("GET", "/v2/models/badcfg/config"),
        ("POST", "/v2/models/badcfg/infer"),
    ]:
        r = requests.request(method, up.url + path, json={}, timeout=60)
        assert r.status_code == 503, (path, r.text)
        assert "badcfg/config.pbtxt" in _error(r)
    # A load reads the model again and refuses it, as thaw serve does (400, its words).
    r = requests.post(f"{up.url}/v2/repository/models/badcfg/load", json={}, timeout=60)
    assert r.status_code == 400, r.text
    assert _error(r).startswith("load failed for model 'badcfg': ")
    assert "badcfg/config.pbtxt" in _error(r)
    index = requests.post(f"{up.url}/v2/repository/index", timeout=60).json()
    (row,) = [r for r in index if r["name"] == "badcfg"]
    assert row["state"] == "UNAVAILABLE" and "config.pbtxt" in row["reason"]
    assert {r["name"] for r in index}.isdisjoint({"README.md", ".cache"})
    assert up.model("badcfg")["state"] == "unavailable"
    r = requests.post(f"{up.url}/v2/models/add_sub/infer", json=_ADD_SUB_JSON, timeout=60)
    assert r.status_code == 200


def test_a_wake_up_slower_than_the_activation_timeout_is_a_json_504(up: UpProcess) -> None:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    start = time.monotonic()
    r = requests.post(f"{up.url}/v2/models/slow_init/infer", json=body, timeout=60)
    assert r.status_code == 504, r.text
    assert "did not become ready within 1 s" in _error(r)
    # Held until its 1 s deadline, not refused at once; the 504 (not the 3 s wake's 200) says
    # the deadline ended it, where a wall-clock upper bound is one a loaded machine outlasts.
    assert time.monotonic() - start >= 1.0
    r = requests.post(f"{up.url}/v2/models/add_sub/infer", json=_ADD_SUB_JSON, timeout=60)
    assert r.status_code == 200


# ---- hostile input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["..%2F..%2Fetc", "%2E%2E", "a%00b", "%24%28reboot%29", "x;rm%20-rf%20~", "a" * 3000],
)
def test_names_that_are_paths_or_shell_words_are_json_404(up: UpProcess, name: str) -> None:
    for method, suffix in [("GET", ""), ("GET", "/ready"), ("POST", "/infer")]:
        r = requests.request(method, f"{up.url}/v2/models/{name}{suffix}", json={}, timeout=60)
        assert r.status_code == 404, (name, suffix, r.text)
        _error(r)
    # Thaw's own per-model call (explicit mode, as this session's): the same refusal.
    r = requests.post(f"{up.url}/thaw/models/{name}/scale-to-zero", timeout=60)
    assert r.status_code == 404, (name, r.text)
    _error(r)


def test_huge_declared_body_is_refused_at_once_without_waking(up: UpProcess) -> None:
    with socket.create_connection(("127.0.0.1", int(up.hostport.split(":")[1])), 30) as s:
        s.sendall(
            b"POST /v2/models/onnx_add/infer HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: 999999999999\r\n\r\n{"
        )
        head = s.recv(65536).decode()
    assert head.startswith("HTTP/1.1 413"), head
    assert '"error"' in head and "limit" in head


def test_chunked_body_over_the_cap_is_413(up: UpProcess) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(MAX_BODY_BYTES // (1 << 20) + 2):
            yield b"0" * (1 << 20)

    r = requests.post(f"{up.url}/v2/models/onnx_add/infer", data=chunks(), timeout=60)
    assert r.status_code == 413
    # thaw serve's words (thawserver.body_limit), naming the flag that raises the limit.
    assert _error(r) == (
        f"request size exceeds the maximum allowed input size of {MAX_BODY_BYTES} bytes. "
        "Use --max-body-bytes to increase the limit."
    )


@pytest.mark.parametrize(
    "raw",
    [
        b"GARBAGE\r\n\r\n",
        b"GET /v2 HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"GET /v2 HTTP/9.9\r\nHost: x\r\n\r\n",
        b"GET /v2/models/a\x00b/ready HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
        b"Transfer-Encoding: chunked\r\n\r\nZZ\r\n",
        b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 20000 + b"\r\n\r\n",
    ],
)
def test_malformed_http_gets_a_json_400_and_the_server_lives(up: UpProcess, raw: bytes) -> None:
    with socket.create_connection(("127.0.0.1", int(up.hostport.split(":")[1])), 30) as s:
        s.sendall(raw)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"400", data
    assert b"application/json" in head
    assert set(json.loads(body)) == {"error"}
    assert requests.get(f"{up.url}/v2/health/live", timeout=10).status_code == 200


def test_a_client_that_stops_sending_its_body_does_not_block_others(up: UpProcess) -> None:
    port = int(up.hostport.split(":")[1])
    stalled = [socket.create_connection(("127.0.0.1", port), 30) for _ in range(3)]
    for s in stalled:
        s.sendall(
            b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{"
        )
    try:
        r = requests.post(f"{up.url}/v2/models/add_sub/infer", json=_ADD_SUB_JSON, timeout=30)
        assert r.status_code == 200
        assert up.model("add_sub")["held_requests"] == 0  # slow bodies are never held
    finally:
        for s in stalled:
            s.close()


# ---- the command line -----------------------------------------------------------------------


def _up(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "thaw.cli", "up", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_help_exits_zero_and_names_the_scale_settings() -> None:
    result = _up("--help")
    assert result.returncode == 0
    assert "--scale-to-zero-grace-s" in result.stdout and "thaw.max_replicas" in result.stdout


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--port", "70000", "`--port` = 70000, must be in [0, 65535]"),
        ("--warm-pool", "-1", "`--warm-pool` = -1, must be in [0, 64]"),
        ("--max-body-bytes", "0", "`--max-body-bytes` = 0, must be in [1, "),
        ("--request-timeout-s", "-1", "`--request-timeout-s` = -1, must be in [0.1, 86400]"),
        ("--drain-timeout-s", "nan", "`--drain-timeout-s` = nan, must be in [0, 3600]"),
        ("--max-replicas", "0", "`--max-replicas` = 0, must be in [1, 100]"),
        ("--target-concurrency", "x", "`--target-concurrency` = 'x', must be a number"),
        ("--direct-max-age-s", "-1", "`--direct-max-age-s` = -1, must be in [0, 86400]"),
        ("--direct-max-age-s", "nan", "`--direct-max-age-s` = nan, must be in [0, 86400]"),
        ("--direct-connections", "maybe", "invalid choice: 'maybe' (choose from 'on', 'off')"),
    ],
)
def test_bad_flag_values_exit_2_naming_flag_value_and_range(
    tmp_path: Path, flag: str, value: str, message: str
) -> None:
    result = _up(str(tmp_path), flag, value)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_nonexistent_repository_exits_2(tmp_path: Path) -> None:
    result = _up(str(tmp_path / "missing"))
    assert result.returncode == 2
    assert "is not a directory" in result.stderr and "Traceback" not in result.stderr


def test_a_port_in_use_is_one_clear_line_and_exit_1(up: UpProcess, up_repo: Path) -> None:
    port = up.hostport.split(":")[1]
    result = _up(str(up_repo), "--port", port, "--warm-pool", "0", "--no-image-build")
    assert result.returncode == 1
    assert f"thaw up: error: cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_grpc_port_in_use_fails_before_any_replica_starts(up: UpProcess, up_repo: Path) -> None:
    # The gRPC port is bound before the fleet starts (replicas are told it), so a taken one is
    # refused at once, with a warm pool asked for and never started.
    port = up.grpc_address.rsplit(":", 1)[1]
    result = _up(str(up_repo), "--port", "0", "--grpc-port", port, "--warm-pool", "2")
    assert result.returncode == 1
    assert f"cannot listen for gRPC on 127.0.0.1:{port}: Address already in use" in result.stderr
    assert "Traceback" not in result.stderr and "add_port.cc" not in result.stderr
    assert "fork_server" not in result.stderr  # the warm pool's fork server never started


def test_empty_repository_starts_and_serves_the_server_routes(tmp_path: Path) -> None:
    up = UpProcess(tmp_path, "--warm-pool", "0", "--no-image-build")
    try:
        assert requests.get(f"{up.url}/v2/health/ready", timeout=10).status_code == 200
        assert requests.post(f"{up.url}/v2/repository/index", timeout=10).json() == []
        assert requests.get(f"{up.url}/v2/models/x", timeout=10).status_code == 404
    finally:
        assert up.stop(signal.SIGINT) == 0
    assert "no servable model" in up.log()


# ---- what is left behind ---------------------------------------------------------------------


def test_sigkill_of_thaw_up_leaves_no_replica_behind(tmp_path: Path) -> None:
    from tests.fixtures.models import make_add_sub

    make_add_sub(tmp_path)
    up = UpProcess(
        tmp_path, "--warm-pool", "1", "--preload-frameworks", "", "--no-image-build",
        "--model-control-mode", "explicit",
    )  # fmt: skip
    try:
        r = requests.post(f"{up.url}/v2/repository/models/add_sub/load", timeout=60)
        assert r.status_code == 200
        up.wait_for(lambda: up.get("/thaw/status")["warm_pool"]["ready"] == 1, 30, "the pool")
        pids = [r["pid"] for r in up.model("add_sub")["replicas"]]
        # Replicas and pool processes, forked by the fork server (its children) or spawned.
        children = _descendants(up.proc.pid)
        assert set(pids) <= set(children) and len(children) >= 2
        os.kill(up.proc.pid, signal.SIGKILL)
        up.proc.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(pid_alive(p) for p in children):
            time.sleep(0.1)
        assert not [p for p in children if pid_alive(p)], "replicas outlived a SIGKILLed thaw up"
    finally:
        up.stop()


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        children = _children(todo.pop())
        found += children
        todo += children
    return found


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


# ---- cold start ------------------------------------------------------------------------------


def _starts(up: UpProcess, model: str) -> float:
    line = f'thaw_replica_starts_total{{model="{model}",result="ok"}} '
    found = [x for x in up.metrics().splitlines() if x.startswith(line)]
    return float(found[0].split()[-1]) if found else 0.0


async def test_burst_at_zero_with_default_settings_starts_exactly_one_replica(
    up: UpProcess,
) -> None:
    import asyncio

    import tritonclient.http.aio as aioclient

    up.wait_for(lambda: up.model("onnx_add")["state"] == "cold", 30, "onnx_add at zero")
    before = _starts(up, "onnx_add")
    client = aioclient.InferenceServerClient(up.hostport, conn_limit=100)
    try:

        async def one(i: int) -> np.ndarray:
            tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
            tensor.set_data_from_numpy(np.full((1, 4), i, dtype=np.float32))
            return (await client.infer("onnx_add", [tensor])).as_numpy("OUTPUT0")

        outputs = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(60))), 60)
    finally:
        await client.close()
    assert len(outputs) == 60
    await asyncio.sleep(1.0)  # two autoscaler ticks after the burst
    assert _starts(up, "onnx_add") == before + 1
    assert up.model("onnx_add")["replicas_desired"] <= 1


def _inference_count(up: UpProcess, model: str) -> int:
    stats = requests.get(f"{up.url}/v2/models/{model}/stats", timeout=30).json()
    return sum(int(s["inference_count"]) for s in stats["model_stats"])


async def test_a_client_that_hangs_up_while_held_is_never_forwarded(
    up: UpProcess, up_repo: Path
) -> None:
    import asyncio

    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    ).encode()
    url = f"{up.url}/v2/models/overflow/infer"  # one slot per replica, one replica, 2 s each
    # The first holds the slot until the second was held and dropped (by the hold file, not
    # its 2 s execute, which a loaded machine could let end before the second was seen held).
    hold = hold_file(up_repo, "overflow")
    hold.write_text(str(2 * HUNG_AFTER_S))
    try:
        first = asyncio.create_task(asyncio.to_thread(requests.post, url, data=body, timeout=90))
        await asyncio.to_thread(
            up.wait_for, lambda: up.model("overflow")["in_flight"] == 1, 30, "the first in flight"
        )
        before = _inference_count(up, "overflow")
        port = int(up.hostport.split(":")[1])
        with socket.create_connection(("127.0.0.1", port), 30) as s:
            s.sendall(
                b"POST /v2/models/overflow/infer HTTP/1.1\r\nHost: x\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await asyncio.to_thread(
                up.wait_for,
                lambda: up.model("overflow")["held_requests"] == 1,
                HUNG_AFTER_S,
                "it is held",
            )
        await asyncio.to_thread(
            up.wait_for,
            lambda: up.model("overflow")["held_requests"] == 0,
            HUNG_AFTER_S,
            "it is dropped",
        )
    finally:
        hold.unlink()  # the first one answers now
    assert (await first).status_code == 200
    await asyncio.sleep(2.5)  # the dropped one would have run by now
    assert _inference_count(up, "overflow") == before + 1
    assert up.model("overflow")["in_flight"] == 0
