"""Traffic that meets a model at zero, through a real `thaw up`: kept-alive connections opened
while it was cold move to its replicas once they are up (activator.direct.move_over), and a
burst held at zero is spread over the replicas the autoscaler starts for it
(activator.endpoint.cold_start.release_cap).

Real `thaw up`, real replica processes, loopback; clients are tritonclient.http, requests and
raw sockets. What moved is read from `thaw_direct_moves_total`, `thaw_handoffs_total` and
`thaw_activator_request_duration_seconds` (requests through the activator); where requests
are, from `/thaw/status`.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from tests.fakes.loop import HUNG_AFTER_S
from tests.fixtures.models import make_slow_execute, make_slow_init
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.up_process import UpProcess, with_params

pytestmark = pytest.mark.integration

BURST = 12
PACE = 2  # the burst model's target_concurrency: what a replica is given of its backlog


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cold_connections")


def _kept_hold(repo: Path) -> Path:
    """While this file exists, `kept`'s wake waits in its initialize (make_slow_init)."""
    return repo.parent / "kept.hold"


@pytest.fixture(scope="module")
def up(repo: Path) -> Iterator[UpProcess]:
    make_slow_init(repo, "kept", delay_s=0.0, hold_file=_kept_hold(repo))
    make_onnx_add(repo, "piped")
    with_params(
        make_slow_execute(repo, "burst", delay_s=0.25),
        target_concurrency=PACE,
        max_replicas=2,
        panic_window_s=1,
        container_concurrency=0,
        scale_to_zero_grace_s=60,
    )
    server = UpProcess(
        repo,
        "--warm-pool", "1",
        "--preload-frameworks", "onnxruntime",
        "--no-image-build",
        "--cache", str(repo.parent / "cache"),
    )  # fmt: skip
    yield server
    server.stop()


def _series(up: UpProcess, name: str, **labels: str) -> float:
    found = 0.0
    for line in up.metrics().splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            found += float(line.rsplit(" ", 1)[1])
    return found


def _in_path(up: UpProcess, model: str) -> float:
    return _series(up, "thaw_activator_request_duration_seconds_count", model=model)


def _inputs() -> list[httpclient.InferInput]:
    tensor = httpclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(np.ones(4, dtype=np.float32))
    return [tensor]


def test_kept_alive_clients_opened_at_zero_move_to_the_replica(up: UpProcess, repo: Path) -> None:
    """Four tritonclient.http clients open their connections while `kept` is at zero (served
    by the activator, their requests held for its wake, which waits until all four are) and
    keep them alive. Each is closed after a complete answer once the replica is up,
    reconnects, and is handed off: from then on their requests no longer pass the activator,
    and none of them failed."""
    assert up.model("kept")["state"] == "cold"
    # Held until every client's first request is: a wake faster than the clients' threads
    # start would hand the later ones off from their first request (nothing to move).
    _kept_hold(repo).write_text(str(HUNG_AFTER_S))
    clients = 4
    stop = threading.Event()
    done = [0] * clients
    errors: list[str] = []

    def run(i: int) -> None:
        client = httpclient.InferenceServerClient(up.hostport, network_timeout=60)
        try:
            while not stop.is_set():
                result = client.infer("kept", _inputs())
                assert result.as_numpy("OUTPUT0").shape == (4,)
                done[i] += 1
        except Exception as exc:  # reported below, with the others
            errors.append(repr(exc))
        finally:
            client.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    try:
        up.wait_for(
            lambda: up.model("kept")["held_requests"] == clients or errors,
            HUNG_AFTER_S,
            "each client's first request to be held for the wake",
        )
        _kept_hold(repo).unlink()  # the wake goes on
        up.wait_for(
            lambda: _series(up, "thaw_direct_moves_total", model="kept") >= clients or errors,
            HUNG_AFTER_S,
            "each kept-alive client to be moved to the replica",
        )
        time.sleep(0.5)  # the moved clients' reconnects: handed off
        in_path, requests_before = _in_path(up, "kept"), sum(done)
        time.sleep(1.5)
        in_path_after, requests_after = _in_path(up, "kept"), sum(done)
    finally:
        _kept_hold(repo).unlink(missing_ok=True)
        stop.set()
        for thread in threads:
            thread.join(HUNG_AFTER_S)
    assert not errors, errors
    assert _series(up, "thaw_direct_moves_total", model="kept") == clients
    assert _series(up, "thaw_handoffs_total", model="kept", result="handed_off") >= clients
    assert requests_after > requests_before
    # Before the move every request passed the activator; after it none does.
    assert in_path_after == in_path, (in_path, in_path_after, requests_before, requests_after)


def _answer(sock: socket.socket, buffer: bytearray) -> bytes:
    """The next response's head from `sock` (its body skipped); b"" at the connection's end."""
    while b"\r\n\r\n" not in buffer:
        data = sock.recv(65536)
        if not data:
            return b""
        buffer += data
    end = buffer.index(b"\r\n\r\n") + 4
    head = bytes(buffer[:end])
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
    while len(buffer) < end + length:
        buffer += sock.recv(65536)
    del buffer[: end + length]
    return head


def test_a_pipelining_client_is_closed_only_after_its_last_request(up: UpProcess) -> None:
    """A raw connection served by the activator (its first request a server path) sends two
    requests for a warm model in one write, then a third half-written before the answers: no
    answer but the last carries `Connection: close`, and every request is answered."""
    ready = b"GET /v2/models/piped/ready HTTP/1.1\r\nHost: x\r\n\r\n"
    requests.post(
        f"{up.url}/v2/models/piped/infer",
        json={"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4],
                          "data": [1, 2, 3, 4]}]},
        timeout=HUNG_AFTER_S,
    ).raise_for_status()  # fmt: skip
    up.wait_for(lambda: up.model("piped")["replicas_ready"] == 1, HUNG_AFTER_S, "piped warm")
    moved = _series(up, "thaw_direct_moves_total", model="piped")
    with socket.create_connection(("127.0.0.1", int(up.hostport.rsplit(":", 1)[1]))) as sock:
        sock.settimeout(HUNG_AFTER_S)
        buffer = bytearray()
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b" 200 " in _answer(sock, buffer)  # served here: not a model path
        time.sleep(1.2)  # older than the move's minimum age
        sock.sendall(ready + ready + ready[:12])
        heads = [_answer(sock, buffer), _answer(sock, buffer)]
        sock.sendall(ready[12:])
        heads.append(_answer(sock, buffer))
        assert all(b" 200 " in head for head in heads), heads
        assert [b"Connection: close" in head for head in heads] == [False, False, True]
        assert sock.recv(1) == b""  # closed after its last answer
    assert _series(up, "thaw_direct_moves_total", model="piped") == moved + 1


def test_a_burst_at_zero_is_spread_over_the_replicas_as_they_come_up(up: UpProcess) -> None:
    """Twelve requests at zero for a model of 0.25 s per request, no per-replica limit. The
    first replica up is given its target's worth (2), not the whole backlog; the rest wait in
    the activator for a slot there or on the replica the autoscaler starts for them: no
    replica ever holds more than 2, and none sits idle while requests wait."""
    assert up.model("burst")["state"] == "cold"
    snapshots: list[dict[str, object]] = []
    finished = threading.Event()

    def watch() -> None:
        while not finished.is_set():
            snapshots.append(up.model("burst"))
            time.sleep(0.02)

    def one(_: int) -> int:
        body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}]}
        url = f"{up.url}/v2/models/burst/infer"
        return requests.post(url, json=body, timeout=120).status_code

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(BURST) as pool:
            codes = list(pool.map(one, range(BURST)))
    finally:
        finished.set()
        watcher.join(HUNG_AFTER_S)
    assert codes == [200] * BURST
    served = 0
    for snapshot in snapshots:
        ready = [r for r in snapshot["replicas"] if r["state"] == "ready"]  # type: ignore[attr-defined]
        assert all(r["in_flight"] <= PACE for r in ready), snapshot
        if snapshot["held_requests"]:
            assert all(r["in_flight"] == PACE for r in ready), snapshot
        served = max(served, len(ready))
    assert served >= 1
