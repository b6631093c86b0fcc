"""Direct connections: `thaw up` hands a warm model's new client connections to a replica.

Real `thaw up`, real replica processes, real loopback; clients are tritonclient.http, aiohttp
and raw sockets. Handoffs are observed through `thaw_handoffs_total` and `/thaw/status`.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fakes.loop import HUNG_AFTER_S
from tests.fixtures.models import make_add_sub, make_python_identity, make_slow_execute
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.up_process import UpProcess, with_params

pytestmark = pytest.mark.integration

MAX_AGE_S = 1.0


@pytest.fixture(scope="module")
def slow_hold_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """While this file exists, calls of the `slow` model execute until it is removed (for at
    most the seconds written in it), not 3 s: the test holds the call a replica dies in."""
    return tmp_path_factory.mktemp("direct_slow") / "hold"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, slow_hold_file: Path) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("direct_repo")
    make_add_sub(repo)
    with_params(make_onnx_add(repo, "idle"), scale_to_zero_grace_s=1)
    with_params(make_onnx_add(repo, "inpath"), direct_connections="false")
    with_params(
        make_slow_execute(repo, "busy", delay_s=0.2),
        target_concurrency=1,
        max_replicas=2,
        container_concurrency=0,
    )
    make_slow_execute(repo, "slow", delay_s=3.0, hold_file=slow_hold_file)
    make_python_identity(repo, "victim")
    make_python_identity(repo, "big")
    server = UpProcess(
        repo,
        "--warm-pool", "1",
        "--preload-frameworks", "onnxruntime",
        "--no-image-build",
        "--cache", str(repo.parent / "cache"),
        "--direct-max-age-s", str(MAX_AGE_S),
    )  # fmt: skip
    yield server
    server.stop()


def _handoffs(up: UpProcess, model: str, result: str = "handed_off") -> float:
    pattern = rf'thaw_handoffs_total{{model="{model}",result="{result}"}} (\S+)'
    match = re.search(pattern, up.metrics())
    return float(match.group(1)) if match else 0.0


def _fallbacks(up: UpProcess, model: str, outcome: str) -> float:
    pattern = rf'thaw_direct_fallbacks_total{{model="{model}",outcome="{outcome}"}} (\S+)'
    match = re.search(pattern, up.metrics())
    return float(match.group(1)) if match else 0.0


def _activator_copies(up: UpProcess, clients: list[socket.socket]) -> int:
    """How many of these clients' connections the activator process holds a descriptor of
    (a connection's socket is one inode, in /proc/net/tcp, whichever process holds it)."""
    held = set()
    for fd in os.listdir(f"/proc/{up.proc.pid}/fd"):
        with contextlib.suppress(OSError):
            held.add(os.readlink(f"/proc/{up.proc.pid}/fd/{fd}"))
    ports = {s.getsockname()[1] for s in clients}
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote_port, inode = int(fields[2].rsplit(":", 1)[1], 16), fields[9]
        count += remote_port in ports and f"socket:[{inode}]" in held
    return count


def _replica_pid(up: UpProcess, model: str) -> int:
    replicas = up.model(model)["replicas"]
    assert len(replicas) == 1, replicas
    return int(replicas[0]["pid"])


def _wake(up: UpProcess, model: str) -> None:
    body = json.dumps(_identity_body(model, [1.0] * 4)).encode()
    conn = http.client.HTTPConnection(up.hostport, timeout=60)
    conn.request("POST", f"/v2/models/{model}/infer", body)
    assert conn.getresponse().status == 200
    conn.close()
    up.wait_for(lambda: up.model(model)["state"] == "warm", 30, f"{model} warm")


def _identity_body(model: str, values: list[float]) -> dict[str, object]:
    if model == "add_sub":
        tensors = [("INPUT0", values), ("INPUT1", values)]
    else:
        tensors = [("INPUT0", values)]
    shape = [1, len(values)] if model in ("idle", "inpath") else [len(values)]
    return {
        "inputs": [{"name": n, "shape": shape, "datatype": "FP32", "data": v} for n, v in tensors]
    }


def _add_sub(client: httpclient.InferenceServerClient, rng: np.random.Generator) -> None:
    a, b = rng.random(4, dtype=np.float32), rng.random(4, dtype=np.float32)
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        tensor = httpclient.InferInput(name, [4], "FP32")
        tensor.set_data_from_numpy(value, binary_data=True)
        inputs.append(tensor)
    result = client.infer("add_sub", inputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


def test_a_warm_models_new_connection_is_handed_off_and_answers(up: UpProcess) -> None:
    _wake(up, "add_sub")
    before = _handoffs(up, "add_sub")
    client = httpclient.InferenceServerClient(up.hostport)
    rng = np.random.default_rng(0)
    try:
        for _ in range(5):
            _add_sub(client, rng)
        assert client.is_model_ready("add_sub")
        up.wait_for(
            lambda: up.model("add_sub")["direct_connections"] >= 1,
            HUNG_AFTER_S,
            "a direct connection",
        )
        replica = up.model("add_sub")["replicas"][0]
        assert replica["direct_connections"] >= 1
        assert up.model("add_sub")["in_flight"] == 0
    finally:
        client.close()
    assert _handoffs(up, "add_sub") == before + 1
    assert 'thaw_direct_connections{model="add_sub"}' in up.metrics()


async def test_aiohttp_clients_are_handed_off_too(up: UpProcess) -> None:
    _wake(up, "add_sub")
    before = _handoffs(up, "add_sub")
    url = f"{up.url}/v2/models/add_sub/infer"
    async with aiohttp.ClientSession() as session:
        for i in range(5):
            async with session.post(url, json=_identity_body("add_sub", [float(i)] * 4)) as r:
                assert r.status == 200
                outputs = {o["name"]: o["data"] for o in (await r.json())["outputs"]}
            assert outputs == {"OUTPUT0": [2.0 * i] * 4, "OUTPUT1": [0.0] * 4}
    assert _handoffs(up, "add_sub") == before + 1


def test_a_handed_off_connection_gets_the_activators_answer_for_everything_else(
    up: UpProcess,
) -> None:
    _wake(up, "add_sub")
    before = _handoffs(up, "add_sub")
    conn = http.client.HTTPConnection(up.hostport, timeout=30)
    try:
        body = json.dumps(_identity_body("add_sub", [1.0] * 4))
        conn.request("POST", "/v2/models/add_sub/infer", body)
        first = conn.getresponse()
        assert (first.status, len(first.read()) > 0) == (200, True)
        assert _handoffs(up, "add_sub") == before + 1
        sock = conn.sock

        def get(path: str) -> tuple[int, bytes]:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()

        status, body = get("/thaw/status")  # only the activator has this route
        assert status == 200 and "models" in json.loads(body)
        status, body = get("/v2/models/inpath/config")  # another model: the activator's answer
        assert (status, json.loads(body)) == (200, up.get("/v2/models/inpath/config"))
        assert get("/v2/health/ready")[0] == 200
        status, body = get("/v2/models/stats")  # every model's rows, as the activator has them
        names = {row["name"] for row in json.loads(body)["model_stats"]}
        assert {"add_sub", "idle", "inpath", "busy"} <= names
        status, body = get("/v2/models/nope/ready")
        assert status == 404 and "error" in json.loads(body)
        assert conn.sock is sock  # all on the one handed-off connection
    finally:
        conn.close()


def test_max_age_closes_direct_connections_and_clients_reconnect(up: UpProcess) -> None:
    _wake(up, "add_sub")
    before = _handoffs(up, "add_sub")
    client = httpclient.InferenceServerClient(up.hostport)
    rng = np.random.default_rng(1)
    try:
        # Until three max-age closes were reconnected through the front door (by count, not
        # in a 3.5 s window, which a loaded machine fills with fewer requests and closes).
        deadline = time.monotonic() + HUNG_AFTER_S
        count = 0
        while count <= 20 or _handoffs(up, "add_sub") < before + 3:
            assert time.monotonic() < deadline, (count, _handoffs(up, "add_sub") - before)
            _add_sub(client, rng)  # never an error across the closes
            count += 1
            time.sleep(0.01)
    finally:
        client.close()


async def test_aiohttp_reconnects_after_a_max_age_close(up: UpProcess) -> None:
    _wake(up, "add_sub")
    url = f"{up.url}/v2/models/add_sub/infer"
    closes = 0
    async with aiohttp.ClientSession() as session:
        deadline = time.monotonic() + HUNG_AFTER_S  # by count of closes, not a 2.5 s window
        while closes < 2:
            assert time.monotonic() < deadline, f"{closes} max-age closes"
            async with session.post(url, json=_identity_body("add_sub", [3.0] * 4)) as r:
                assert r.status == 200
                closes += r.headers.get("Connection", "").lower() == "close"
                await r.read()
            await asyncio.sleep(0.01)


def test_scale_to_zero_closes_an_idle_direct_connection(up: UpProcess) -> None:
    _wake(up, "idle")
    before = _handoffs(up, "idle")
    with socket.create_connection(("127.0.0.1", int(up.hostport.split(":")[1])), 30) as s:
        body = json.dumps(_identity_body("idle", [1.0] * 4)).encode()
        s.sendall(
            b"POST /v2/models/idle/infer HTTP/1.1\r\nHost: x\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert s.recv(65536).startswith(b"HTTP/1.1 200")
        assert _handoffs(up, "idle") == before + 1
        # The open, idle connection does not keep the model warm past its 1 s grace...
        up.wait_for(lambda: up.model("idle")["state"] == "cold", 30, "idle to scale to zero")
        # ...and the replica's shutdown closed it: the client reconnects via the activator.
        s.settimeout(10)
        assert s.recv(65536) == b""
    _wake(up, "idle")


async def test_the_autoscaler_sees_load_on_direct_connections(up: UpProcess) -> None:
    _wake(up, "busy")
    before = _handoffs(up, "busy")
    url = f"{up.url}/v2/models/busy/infer"
    activator_in_flight: list[int] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        stop_at = time.monotonic() + 15

        async def client() -> None:
            while time.monotonic() < stop_at and up.model("busy")["replicas_desired"] < 2:
                async with session.post(url, json=_identity_body("busy", [1.0])) as r:
                    assert r.status == 200
                    await r.read()

        async def watch() -> None:
            while time.monotonic() < stop_at and up.model("busy")["replicas_desired"] < 2:
                activator_in_flight.append(up.model("busy")["in_flight"])
                await asyncio.sleep(0.1)

        await asyncio.gather(watch(), *(client() for _ in range(4)))
    assert up.model("busy")["replicas_desired"] == 2, up.log()
    assert _handoffs(up, "busy") >= before + 4
    # The demand was on direct connections: the activator itself had (almost) none in flight.
    assert sum(activator_in_flight) <= len(activator_in_flight) // 4


def _slow_input(value: float) -> list[httpclient.InferInput]:
    tensor = httpclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.float32), binary_data=True)
    return [tensor]


def test_a_replica_killed_mid_request_answers_502_on_its_direct_connection(
    up: UpProcess, slow_hold_file: Path
) -> None:
    """The activator keeps its copy of the handed-off socket and the request's state byte:
    the client gets the activator's 502 JSON at once (not replayed), then carries on."""
    _wake(up, "slow")
    before, bad_gateways = _handoffs(up, "slow"), _fallbacks(up, "slow", "bad_gateway")
    connected = threading.Event()
    failures: list[tuple[float, InferenceServerException]] = []
    results: list[np.ndarray] = []

    def client_thread() -> None:  # tritonclient.http (gevent) stays in one thread
        client = httpclient.InferenceServerClient(up.hostport, network_timeout=60)
        try:
            assert client.is_model_ready("slow")  # the connection, opened warm: handed off
            connected.set()
            try:
                client.infer("slow", _slow_input(6.0))
            except InferenceServerException as exc:
                failures.append((time.monotonic(), exc))
            # The next request is served: held until a new replica is ready.
            results.append(client.infer("slow", _slow_input(7.0)).as_numpy("OUTPUT0"))
        finally:
            client.close()

    # The request the replica dies in is held until after the kill, for up to twice
    # HUNG_AFTER_S: failed within HUNG_AFTER_S of the kill, it failed on the death, promptly,
    # not at the execute's end (a wall-clock bound just past a short execute is one a loaded
    # machine outlasts).
    slow_hold_file.write_text(str(2 * HUNG_AFTER_S))
    thread = threading.Thread(target=client_thread)
    try:
        thread.start()
        assert connected.wait(30)
        assert _handoffs(up, "slow") == before + 1
        up.wait_for(
            lambda: up.model("slow")["replicas"][0]["direct_in_flight"] == 1,
            HUNG_AFTER_S,
            "the request in flight on a direct connection",
        )
        pid = _replica_pid(up, "slow")
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
    finally:
        slow_hold_file.unlink()  # the next replica's executes take 3 s again
    thread.join(60)
    [(failed_at, error)] = failures
    assert failed_at - killed_at < HUNG_AFTER_S
    assert error.status() == "502"
    assert re.fullmatch(
        r"replica slow-\d+ of model 'slow' died while handling the request", error.message()
    )
    [output] = results
    np.testing.assert_array_equal(output, [7.0])
    assert _fallbacks(up, "slow", "bad_gateway") == bad_gateways + 1
    assert _replica_pid(up, "slow") != pid


def test_an_idle_direct_connection_outlives_its_replica(up: UpProcess) -> None:
    _wake(up, "victim")
    before, taken_back = _handoffs(up, "victim"), _fallbacks(up, "victim", "taken_back")
    conn = http.client.HTTPConnection(up.hostport, timeout=60)
    body = json.dumps(_identity_body("victim", [1.0, 2.0]))
    try:
        conn.request("POST", "/v2/models/victim/infer", body)
        response = conn.getresponse()
        assert (response.status, len(response.read()) > 0) == (200, True)
        assert _handoffs(up, "victim") == before + 1
        sock = conn.sock
        os.kill(_replica_pid(up, "victim"), signal.SIGKILL)
        up.wait_for(
            lambda: _fallbacks(up, "victim", "taken_back") == taken_back + 1,
            HUNG_AFTER_S,
            "the activator to take the idle connection back",
        )
        conn.request("POST", "/v2/models/victim/infer", body)  # the same connection
        response = conn.getresponse()
        assert response.status == 200  # held by the activator until a new replica is ready
        assert json.loads(response.read())["outputs"][0]["data"] == [1.0, 2.0]
        assert conn.sock is sock
    finally:
        conn.close()


def test_a_replica_killed_mid_response_aborts_its_direct_connection(up: UpProcess) -> None:
    """A response already started cannot become a 502: the client sees the connection reset
    (or cut short), never a body that looks complete."""
    _wake(up, "big")
    aborted = _fallbacks(up, "big", "aborted")
    values = np.arange(4 << 20, dtype=np.float32)  # 16 MiB out: more than socket buffers hold
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [values.size],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": values.nbytes},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    port = int(up.hostport.split(":")[1])
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the client reads slowly
        s.settimeout(30)
        s.connect(("127.0.0.1", port))
        s.sendall(
            b"POST /v2/models/big/infer HTTP/1.1\r\nHost: x\r\n"
            + f"Inference-Header-Content-Length: {len(header)}\r\n".encode()
            + f"Content-Length: {len(header) + values.nbytes}\r\n\r\n".encode()
            + header
            + values.tobytes()
        )
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(4096)
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
        os.kill(_replica_pid(up, "big"), signal.SIGKILL)
        received, reset = len(body), False
        try:
            while chunk := s.recv(65536):
                received += len(chunk)
        except ConnectionResetError:
            reset = True
        assert reset or received < length, f"{received} of {length} bytes and EOF"
    up.wait_for(
        lambda: _fallbacks(up, "big", "aborted") == aborted + 1, HUNG_AFTER_S, "the abort count"
    )


def test_ended_direct_connections_reach_the_client_and_free_the_activators_copies(
    up: UpProcess,
) -> None:
    """The activator holds a copy of every handed-off socket until the replica reports the
    connection ended; a max-age close still reaches the client as EOF at once."""
    _wake(up, "add_sub")
    up.wait_for(lambda: up.model("add_sub")["direct_connections"] == 0, 10, "no direct conns")
    port = int(up.hostport.split(":")[1])
    body = json.dumps(_identity_body("add_sub", [1.0] * 4)).encode()
    request = (
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )

    def exchange(s: socket.socket) -> bytes:
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536)
        head, _, rest = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
        while len(rest) < length:
            rest += s.recv(65536)
        assert head.startswith(b"HTTP/1.1 200")
        return head

    clients = [socket.create_connection(("127.0.0.1", port), 10) for _ in range(4)]
    try:
        for s in clients:
            assert b"connection: close" not in exchange(s).lower()
        up.wait_for(
            lambda: up.model("add_sub")["direct_connections"] == 4, HUNG_AFTER_S, "4 direct"
        )
        assert _activator_copies(up, clients) == 4  # handed off, and still held
        time.sleep(MAX_AGE_S + 0.1)
        for s in clients:
            assert b"connection: close" in exchange(s).lower()  # max age
            # EOF, though the activator still had a copy; before the socket's 10 s timeout
            # (recv raises TimeoutError then): that is the bound, with a loaded machine's margin
            assert s.recv(65536) == b""
        # The replica reported them ended: the activator closed its copies.
        up.wait_for(lambda: _activator_copies(up, clients) == 0, HUNG_AFTER_S, "copies closed")
        assert up.model("add_sub")["direct_connections"] == 0
    finally:
        for s in clients:
            s.close()


def test_a_model_with_direct_connections_off_stays_behind_the_activator(up: UpProcess) -> None:
    _wake(up, "inpath")
    disabled = _handoffs(up, "inpath", "disabled")
    for _ in range(2):
        _wake(up, "inpath")
    assert _handoffs(up, "inpath", "disabled") == disabled + 2
    assert _handoffs(up, "inpath") == 0


def test_garbage_on_a_fresh_connection_still_gets_the_activators_json_400(up: UpProcess) -> None:
    _wake(up, "add_sub")
    with socket.create_connection(("127.0.0.1", int(up.hostport.split(":")[1])), 30) as s:
        s.sendall(b"\x16\x03\x01\x00\x05hello\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"400"
    assert set(json.loads(body)) == {"error"}
    assert _handoffs(up, "", "not_http") >= 1
