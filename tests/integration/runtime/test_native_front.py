"""`thaw serve --front native` (native/front, decision 0032 phase 1), a real server and its
real front: the same bytes get the same answers as from the Python front, bodies stream both
ways, the deadlines and the cap hold, a stop drains, a killed server leaves no front behind,
and a front that cannot start is a clear exit 1.

The whole suites run on the native front with `THAW_TEST_FRONT=native` (tests/fixtures/
serve_process.py); this module runs in every `make test`. Skipped where the front is not built
(`make native` needs cargo), except in CI on a machine with cargo, where the build must have
happened."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.http as httpclient

from runtime.errors import ServingError
from runtime.process.native_front import front_binary
from tests.fixtures.models import make_add_sub, make_python_identity, make_slow_execute
from tests.fixtures.serve_process import ServeProcess, both_fronts
from tests.support import slow_client_checks as checks


def _built() -> bool:
    try:
        front_binary()
    except ServingError:
        return False
    return True


requires_front = pytest.mark.skipif(
    not _built(), reason="the native front is not built (make native)"
)
pytestmark = pytest.mark.integration

HEAD_S, IDLE_S = 2.0, 2.0


def test_ci_builds_the_front_where_cargo_is() -> None:
    """`make test` builds the front before pytest (the Makefile's `native`): in CI, on a
    machine with cargo, a missing binary is a failed build, not a reason to skip."""
    if not os.environ.get("CI") or shutil.which("cargo") is None:
        pytest.skip("not CI, or no cargo here")
    assert _built(), "make native did not build native/front (see its output above pytest's)"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("native_front_repo")
    make_add_sub(repo)
    make_python_identity(repo, "identity")
    make_slow_execute(repo, "slow", delay_s=1.5)
    return repo


FLAGS = ("--max-body-bytes", str(1 << 20), "--allow-grpc=false")


def _serve(repo: Path, front: str, *args: str) -> ServeProcess:
    return ServeProcess(repo, "--front", front, *FLAGS, *args)


@pytest.fixture(scope="module")
def servers(repo: Path) -> Iterator[dict[str, ServeProcess]]:
    if not _built():
        pytest.skip("the native front is not built (make native)")
    with both_fronts(repo, *FLAGS) as started:
        yield started


def _exchange(hostport: str, request: bytes) -> tuple[int, str, bytes]:
    """Status, content type and body of the answer to raw `request` (which asks to close)."""
    host, port = hostport.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    headers = {k.lower(): v for k, v in headers.items()}
    if headers.get("transfer-encoding") == "chunked":
        body = _dechunk(body)
    return int(lines[0].split(" ")[1]), headers.get("content-type", ""), body


def _dechunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, body = out + body[:size], body[size + 2 :]
    return out


_INFER = json.dumps(
    {"inputs": [{"name": f"INPUT{i}", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}
                for i in (0, 1)]}
).encode()  # fmt: skip


def _post(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: x", "Connection: close", *extra]
    if not any(h.lower().startswith("transfer-encoding") for h in extra):
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _get(path: str, version: str = "1.1") -> bytes:
    return f"GET {path} HTTP/{version}\r\nHost: x\r\nConnection: close\r\n\r\n".encode()


REQUESTS = {
    "ready": _get("/v2/health/ready"),
    "live over HTTP/1.0": _get("/v2/health/live", "1.0"),
    "metadata": _get("/v2/models/add_sub"),
    "config with a query": _get("/v2/models/add_sub/config?x=1&y"),
    "infer": _post("/v2/models/add_sub/infer", _INFER),
    "infer chunked": _post(
        "/v2/models/add_sub/infer",
        b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (_INFER[:10], _INFER[10:]))
        + b"0\r\n\r\n",
        "Transfer-Encoding: chunked",
    ),
    "bad JSON": _post("/v2/models/add_sub/infer", b'{"inputs": ['),
    "unknown model": _post("/v2/models/nope/infer", _INFER),
    "unknown route": _get("/v3/anything"),
    "wrong method": b"DELETE /v2/models/add_sub HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    "body over the cap": _post("/v2/models/add_sub/infer", b"x" * (2 << 20)),
    "repository index": _post("/v2/repository/index", b"{}"),
    "bad request line": b"GARBAGE\r\n\r\n",
    "bad chunk size": _post("/v2/models/add_sub/infer", b"zz\r\n", "Transfer-Encoding: chunked"),
}


@requires_front
@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_the_same_bytes_get_the_same_answer_from_both_fronts(
    servers: dict[str, ServeProcess], name: str
) -> None:
    python = _exchange(servers["python"].hostport, REQUESTS[name])
    native = _exchange(servers["native"].hostport, REQUESTS[name])
    if name in ("bad request line", "bad chunk size"):
        # Which parser refuses differs (aiohttp's llhttp, hyper): each says why in its words.
        assert native[0] == python[0] == 400
        assert native[1] == python[1] == "application/json"
        assert list(json.loads(native[2])) == ["error"]
        return
    assert native == python


@requires_front
def test_large_binary_tensors_stream_through_both_ways(servers: dict[str, ServeProcess]) -> None:
    client = httpclient.InferenceServerClient(servers["native"].hostport)
    data = np.arange(200_000, dtype=np.float32)  # 800 kB each way, under the 1 MiB cap
    tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data, binary_data=True)
    wanted = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
    result = client.infer("identity", [tensor], outputs=[wanted])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    assert client.get_inference_statistics("identity")["model_stats"][0]["inference_count"] >= 1


@pytest.fixture(scope="module")
def deadlines(repo: Path) -> Iterator[ServeProcess]:
    if not _built():
        pytest.skip("the native front is not built (make native)")
    server = _serve(
        repo, "native", "--head-timeout-s", str(HEAD_S), "--idle-timeout-s", str(IDLE_S),
    )  # fmt: skip
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _hostport(server: ServeProcess) -> tuple[str, int]:
    host, port = server.hostport.rsplit(":", 1)
    return host, int(port)


@requires_front
def test_slow_heads_are_answered_408_at_the_head_deadline(deadlines: ServeProcess) -> None:
    checks.assert_slow_heads_closed(*_hostport(deadlines), 100, HEAD_S)


@requires_front
def test_an_idle_connection_is_closed_at_the_idle_deadline(deadlines: ServeProcess) -> None:
    checks.assert_idle_close(*_hostport(deadlines), IDLE_S)


@requires_front
def test_past_the_cap_a_connection_is_answered_503(repo: Path) -> None:
    server = _serve(repo, "native", "--max-connections", "4")
    try:
        server.wait_ready()
        checks.assert_cap_refuses(*_hostport(server), 4)
    finally:
        server.stop()


def _front_process(server: ServeProcess) -> psutil.Process:
    fronts = [p for p in psutil.Process(server.proc.pid).children() if p.name() == "thaw-front"]
    assert len(fronts) == 1, fronts
    return fronts[0]


@requires_front
def test_a_stop_answers_the_request_in_flight_and_then_refuses(repo: Path) -> None:
    server = _serve(repo, "native")
    server.wait_ready()
    answers: list[object] = []

    def infer() -> None:
        client = httpclient.InferenceServerClient(server.hostport, network_timeout=30)
        tensor = httpclient.InferInput("INPUT0", [2], "FP32")
        tensor.set_data_from_numpy(np.array([1, 2], dtype=np.float32))
        try:
            answers.append(client.infer("slow", [tensor]).as_numpy("OUTPUT0").tolist())
        except Exception as exc:  # the test reports what the client saw
            answers.append(exc)

    argv = _front_process(server).cmdline()
    upstream = Path(argv[argv.index("--upstream") + 1])
    caller = threading.Thread(target=infer)
    caller.start()
    time.sleep(0.5)  # inside the model's 1.5 s
    server.proc.send_signal(signal.SIGTERM)
    caller.join(30)
    assert answers == [[1.0, 2.0]]
    code = server.proc.wait(30)
    assert code == 0, server.logs()
    assert "Timeout 30: Found 1 HTTP service connections" in server.logs()  # Triton's words
    assert not upstream.parent.exists()
    server.stop()
    with pytest.raises(OSError):
        socket.create_connection(_hostport(server), timeout=5).close()


@requires_front
def test_a_killed_server_leaves_no_front_holding_its_port_nor_its_socket(repo: Path) -> None:
    server = _serve(repo, "native")
    server.wait_ready()
    front = _front_process(server)
    argv = front.cmdline()
    upstream = Path(argv[argv.index("--upstream") + 1])
    assert upstream.is_socket()
    server.proc.kill()
    server.proc.wait(10)
    front.wait(10)  # its standard input ended with the server
    with pytest.raises(OSError):
        socket.create_connection(_hostport(server), timeout=5).close()
    assert not upstream.parent.exists()  # the front removed the gone server's socket
    server.stop()


@requires_front
def test_a_port_in_use_is_a_clear_exit_1(repo: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = _serve(repo, "native", "--port", str(port))
        assert server.proc.wait(60) == 1
    logs = server.logs()
    server.stop()
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in logs, logs


def test_a_missing_front_binary_is_a_clear_exit_1(repo: Path, tmp_path: Path) -> None:
    server = ServeProcess(
        repo, "--front", "native", env={"THAW_FRONT_BINARY": str(tmp_path / "none")}
    )
    assert server.proc.wait(60) == 1
    logs = server.logs()
    server.stop()
    assert f"THAW_FRONT_BINARY={tmp_path / 'none'}: not an executable file" in logs, logs


@requires_front
def test_a_front_that_dies_stops_its_server_with_exit_1(repo: Path) -> None:
    server = _serve(repo, "native")
    server.wait_ready()
    _front_process(server).kill()
    assert server.proc.wait(60) == 1
    logs = server.logs()
    server.stop()
    assert "the native front exited (code -9): the HTTP port is gone" in logs, logs
