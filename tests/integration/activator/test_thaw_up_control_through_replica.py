"""Model-control calls that reach a real `thaw up` through one of the model's own replicas: a
client's keep-alive connection handed to the replica (the warm path), on which the client then
sends a repository load (the model's config changed; unchanged: Triton reloads it; its
directory removed) or Thaw's scale-to-zero. The replica forwards the call to the front door,
and the call replaces or stops that very replica: it must answer at once, not wait for the
replica's stop (which waits for the connection to go quiet, so both waited the drain timeout,
then the client got `502 replica ... died while handling the request`). The client's next
request on the same connection is answered for the new files, not by the replica being
replaced."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.loop import HUNG_AFTER_S
from tests.fixtures.models import ECHO_EXECUTE, SCALED_PY, python_model
from tests.fixtures.up_process import UpProcess, light_args, pid_alive
from thawwire.model_control import not_in_repository

pytestmark = pytest.mark.integration

_INFER = json.dumps(
    {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}]}
).encode()
# Far above what the test takes: waiting it out shows as a failed test (a 502, a timeout), not
# a slow one. The max age never ends a direct connection here: only a drain does.
_DRAIN_TIMEOUT_S = 60


def _scale(repo: Path, scale: int) -> None:
    """`scaled`'s config with `scale`; its mtime moved on (a change, whatever its size)."""
    path = repo / "scaled" / "config.pbtxt"
    before = path.stat().st_mtime_ns if path.exists() else 0
    python_model(
        repo,
        "scaled",
        'name: "scaled"\nbackend: "python"\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        f'parameters {{ key: "scale" value {{ string_value: "{scale}" }} }}\n',
        SCALED_PY,
    )
    if before:
        os.utime(path, ns=(before + 10**9, before + 10**9))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("control_through_replica") / "repo"
    repo.mkdir()
    _scale(repo, 1)
    python_model(
        repo,
        "gone",
        'name: "gone"\nbackend: "python"\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n',
        "import triton_python_backend_utils as pb_utils\n\n\nclass TritonPythonModel:"
        + ECHO_EXECUTE,
    )
    return repo


@pytest.fixture(scope="module")
def up(repo: Path) -> Iterator[UpProcess]:
    server = UpProcess(
        repo,
        *light_args(repo),
        "--model-control-mode=explicit",
        f"--drain-timeout-s={_DRAIN_TIMEOUT_S}",
        "--direct-max-age-s=3600",
    )
    yield server
    server.stop()


def _call(conn: http.client.HTTPConnection, path: str, body: bytes = b"") -> tuple[int, bytes]:
    conn.request("POST", path, body)
    resp = conn.getresponse()
    return resp.status, resp.read()


def _output(conn: http.client.HTTPConnection, model: str = "scaled") -> list[float]:
    status, body = _call(conn, f"/v2/models/{model}/infer", _INFER)
    assert status == 200, body
    return list(json.loads(body)["outputs"][0]["data"])


def _handed_off(up: UpProcess, model: str = "scaled") -> http.client.HTTPConnection:
    """A new keep-alive connection whose first request (an inference of the warm `model`) was
    handed to its replica."""
    conn = http.client.HTTPConnection(up.hostport, timeout=120)
    _output(conn, model)
    up.wait_for(lambda: up.model(model)["direct_connections"] == 1, HUNG_AFTER_S, "handoff")
    return conn


def _pids(up: UpProcess, model: str = "scaled") -> list[int]:
    return [r["pid"] for r in up.model(model)["replicas"]]


def _plain(up: UpProcess, path: str) -> tuple[int, bytes]:
    """`path` POSTed on a connection of its own, served by the activator."""
    conn = http.client.HTTPConnection(up.hostport, timeout=120)
    try:
        return _call(conn, path)
    finally:
        conn.close()


def test_a_load_through_the_replica_it_replaces_answers_and_the_next_request_is_new(
    up: UpProcess, repo: Path
) -> None:
    assert _plain(up, "/v2/repository/models/scaled/load") == (200, b"")
    conn = _handed_off(up)
    try:
        [old] = _pids(up)
        _scale(repo, 2)  # beyond instance_group: the replica is replaced
        assert _call(conn, "/v2/repository/models/scaled/load") == (200, b"")
        # The same connection (http.client reconnects after `Connection: close`): new files.
        assert _output(conn) == [2.0, 4.0, 6.0, 8.0]
        up.wait_for(lambda: old not in _pids(up), HUNG_AFTER_S, "the old replica's stop")
    finally:
        conn.close()


def test_a_reload_and_a_scale_to_zero_through_the_replica_answer(up: UpProcess) -> None:
    conn = _handed_off(up)
    try:
        [old] = _pids(up)
        # Unchanged: Triton loads it again all the same (a new replica here).
        assert _call(conn, "/v2/repository/models/scaled/load") == (200, b"")
        up.wait_for(lambda: old not in _pids(up), HUNG_AFTER_S, "the old replica's stop")
        conn.close()
        conn = _handed_off(up)
        assert _call(conn, "/thaw/models/scaled/scale-to-zero") == (200, b"")
        up.wait_for(lambda: _pids(up) == [], HUNG_AFTER_S, "scaled at zero")
        assert _output(conn) == [2.0, 4.0, 6.0, 8.0]  # woken again, still loaded
    finally:
        conn.close()


def test_a_load_of_a_removed_model_through_its_replica_is_refused(
    up: UpProcess, repo: Path
) -> None:
    assert _plain(up, "/v2/repository/models/gone/load") == (200, b"")
    conn = _handed_off(up, "gone")
    try:
        [pid] = _pids(up, "gone")
        shutil.rmtree(repo / "gone")
        status, body = _call(conn, "/v2/repository/models/gone/load")
        assert (status, json.loads(body)) == (404, {"error": not_in_repository("gone")})
        status, index = _plain(up, "/v2/repository/index")
        assert "gone" not in [m["name"] for m in json.loads(index)]
        up.wait_for(lambda: not pid_alive(pid), HUNG_AFTER_S, "the dropped model's replica to stop")
    finally:
        conn.close()


def test_a_load_beside_a_busy_direct_client_does_not_wait_for_its_max_age(
    up: UpProcess, repo: Path
) -> None:
    """A client in a closed loop on a connection handed to the replica a load replaces kept
    that replica's drain busy until its connection's max age (10 s by default; 3600 s here),
    and the load waited as long. The drained replica now ends each connection at its next
    answer: the client reconnects through the activator, and the load answers long before
    the drain timeout."""
    assert _plain(up, "/v2/repository/models/scaled/load") == (200, b"")
    conn = _handed_off(up)
    [old] = _pids(up)
    answers: list[object] = []
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            try:
                answers.append(_output(conn)[0])
            except (OSError, AssertionError, http.client.HTTPException) as exc:
                answers.append(repr(exc))

    client = threading.Thread(target=busy)
    client.start()
    try:
        up.wait_for(lambda: len(answers) > 20, HUNG_AFTER_S, "the busy client's answers")
        _scale(repo, 3)
        load = http.client.HTTPConnection(up.hostport, timeout=_DRAIN_TIMEOUT_S / 2)
        assert _call(load, "/v2/repository/models/scaled/load") == (200, b"")
        load.close()
        assert old not in _pids(up)  # stopped before the load answered
        seen = len(answers)
        up.wait_for(lambda: 3.0 in answers[seen:], HUNG_AFTER_S, "the new files' answers")
    finally:
        stop.set()
        client.join(HUNG_AFTER_S)
        conn.close()
    assert {type(a) for a in answers} == {float}, [a for a in answers if not isinstance(a, float)]
