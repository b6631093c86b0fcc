"""The replicas of explicit mode's load state through a real `thaw up` (docs/decisions/0024):
a model with `thaw.min_replicas` gets its replicas only once loaded and none after an unload;
a client connection handed to a replica (the warm path) is not answered for the model by that
replica once it is unloaded, even while the replica still drains a request the activator
proxies to it: the client gets Triton's NOT_FOUND, as from `thaw serve`."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.loop import HUNG_AFTER_S
from tests.fixtures.models import make_add_sub, make_slow_execute
from tests.fixtures.up_process import UpProcess, light_args, with_params

pytestmark = pytest.mark.integration

_ADD_SUB = json.dumps(
    {
        "inputs": [
            {"name": n, "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}
            for n in ("INPUT0", "INPUT1")
        ]
    }
).encode()
_IDENTITY = json.dumps(
    {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}]}
).encode()


@pytest.fixture(scope="module")
def hold(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """While this file exists, calls of `held` execute until it is removed (at most the seconds
    written in it): the test keeps a proxied request on the replica while it drains."""
    return tmp_path_factory.mktemp("load_state_hold") / "hold"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, hold: Path) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("load_state_replicas_repo")
    with_params(make_add_sub(repo, "kept"), min_replicas=1, max_replicas=1)
    with_params(make_slow_execute(repo, "held", delay_s=0.0, hold_file=hold), max_replicas=1)
    server = UpProcess(
        repo,
        *light_args(repo),
        "--model-control-mode=explicit",
        "--load-model-at-zero=held",
    )  # fmt: skip
    yield server
    server.stop()


def _post(up: UpProcess, path: str, body: bytes = b"") -> int:
    request = urllib.request.Request(f"{up.url}{path}", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def _quiet(model: dict[str, Any]) -> bool:
    return (model["replicas_desired"], model["replicas_starting"], model["replicas"]) == (0, 0, [])


def test_min_replicas_come_with_the_load_and_go_with_the_unload(up: UpProcess) -> None:
    assert _quiet(up.model("kept")), up.model("kept")  # not loaded: none, not even desired
    assert _post(up, "/v2/repository/models/kept/load") == 200
    kept = up.model("kept")
    assert (kept["replicas_ready"], kept["replicas_desired"]) == (1, 1)
    assert _post(up, "/v2/repository/models/kept/unload") == 200
    up.wait_for(lambda: _quiet(up.model("kept")), HUNG_AFTER_S, "kept drained")
    # Several ticks (0.5 s each) later, nothing came back: an unloaded model keeps no minimum.
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        assert _quiet(up.model("kept")), up.model("kept")
        time.sleep(0.1)
    assert _post(up, "/v2/repository/models/kept/load") == 200  # loaded again: kept again
    assert up.model("kept")["replicas_ready"] == 1


def _infer_on(conn: http.client.HTTPConnection, model: str) -> tuple[int, bytes]:
    conn.request("POST", f"/v2/models/{model}/infer", _IDENTITY)
    resp = conn.getresponse()
    return resp.status, resp.read()


def _replica_says_ready(url: str, model: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v2/models/{model}/ready", timeout=10) as resp:
            return bool(resp.status == 200)
    except OSError:  # refused (HTTPError), or the replica gone
        return False


def test_a_handed_off_connection_is_refused_once_unloaded(up: UpProcess, hold: Path) -> None:
    assert _post(up, "/v2/models/held/infer", _IDENTITY) == 200  # woken
    direct = http.client.HTTPConnection(up.hostport, timeout=120)
    proxied = http.client.HTTPConnection(up.hostport, timeout=120)
    try:
        assert _infer_on(direct, "held")[0] == 200  # a warm model's new connection: handed off
        up.wait_for(lambda: up.model("held")["direct_connections"] == 1, HUNG_AFTER_S, "handoff")
        (replica,) = up.model("held")["replicas"]
        # A connection whose first request is the activator's own stays with the activator:
        # its inference is proxied, and holds the replica's drain until it is answered.
        proxied.request("GET", "/v2/health/ready")
        ready = proxied.getresponse()
        assert (ready.status, ready.read()) == (200, b"")
        hold.write_text("60")
        answers: dict[str, int] = {}
        slow = threading.Thread(
            target=lambda: answers.update(proxied=_infer_on(proxied, "held")[0])
        )
        slow.start()
        up.wait_for(lambda: up.model("held")["in_flight"] == 1, HUNG_AFTER_S, "proxied request")
        unloading = threading.Thread(
            target=lambda: answers.update(unload=_post(up, "/v2/repository/models/held/unload"))
        )
        unloading.start()
        up.wait_for(
            lambda: not _replica_says_ready(replica["url"], "held"),
            HUNG_AFTER_S,
            "the draining replica to have unloaded the model",
        )
        status, body = _infer_on(direct, "held")  # the handed-off connection, mid drain
        assert status == 404, body
        assert json.loads(body) == {
            "error": "Request for unknown model: 'held' has no available versions"
        }
        hold.unlink()
        slow.join(HUNG_AFTER_S)
        unloading.join(HUNG_AFTER_S)
        assert answers == {"proxied": 200, "unload": 200}  # what was on the replica finished
    finally:
        hold.unlink(missing_ok=True)
        direct.close()
        proxied.close()
