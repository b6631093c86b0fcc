"""A model whose load outlasts the activation timeout, through a real `thaw up`: held
requests get their 504 at `activation_timeout_s`, but the replica's start goes on (its own
limit is `load_timeout_s`) and a later request is served; the repository load call waits for
the load, as Triton's does (docs/scale-to-zero.md)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
import requests

from tests.fixtures.models import make_slow_init
from tests.fixtures.up_process import UpProcess, light_args, with_params

pytestmark = pytest.mark.integration

INIT_S = 4.0  # each model's initialize(): longer than its 1 s activation timeout
_BODY = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [2.0]}]}
_PATIENCE_S = 120.0  # a loaded CI box (2 cores, two suites) can stretch a 4 s load a lot


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("load_timeout_repo")
    for name in ("slow_request", "slow_load_call"):
        with_params(make_slow_init(repo, name, delay_s=INIT_S), activation_timeout_s=1)
    server = UpProcess(
        repo,
        *light_args(repo),
        "--model-control-mode", "explicit",
        "--load-model-at-zero=*",  # servable at zero, none woken at start
        "--load-timeout-s", "300",
    )  # fmt: skip
    yield server
    server.stop()


def _infer(up: UpProcess, model: str) -> requests.Response:
    return requests.post(f"{up.url}/v2/models/{model}/infer", json=_BODY, timeout=_PATIENCE_S)


def _starts(up: UpProcess, model: str, result: str) -> float:
    pattern = rf'thaw_replica_starts_total\{{model="{model}",result="{result}"\}} (\S+)'
    found = re.search(pattern, up.metrics())
    return float(found.group(1)) if found else 0.0


def test_a_request_held_past_the_activation_timeout_gets_504_and_a_later_one_is_served(
    up: UpProcess,
) -> None:
    r = _infer(up, "slow_request")
    assert r.status_code == 504, r.text
    error = r.json()["error"]
    assert "did not become ready within 1 s" in error
    assert "its start goes on" in error
    # Retries while it loads get 504 too, until the one start that went on is ready.
    deadline = time.monotonic() + _PATIENCE_S
    while (r := _infer(up, "slow_request")).status_code == 504:
        assert time.monotonic() < deadline, up.log()
        time.sleep(0.5)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [2.0]
    assert _starts(up, "slow_request", "ok") == 1  # one start served them, none failed
    assert _starts(up, "slow_request", "failed") == 0


def test_the_load_call_waits_for_a_load_longer_than_the_activation_timeout(
    up: UpProcess,
) -> None:
    began = time.monotonic()
    r = requests.post(f"{up.url}/v2/repository/models/slow_load_call/load", timeout=_PATIENCE_S)
    assert r.status_code == 200, r.text
    assert time.monotonic() - began >= 1.0  # past the activation timeout, not refused at it
    assert up.model("slow_load_call")["state"] == "warm"
    r = _infer(up, "slow_load_call")
    assert r.status_code == 200, r.text
    assert _starts(up, "slow_load_call", "ok") == 1
