"""`thaw up` SIGKILLed while it holds requests (a cold start under way) and forwards others
(a replica executing): every client sees its connection reset or closed, never an answer
that looks complete, and no replica, pool or fork-server process outlives it."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from tests.fixtures.models import make_execution_recorder, make_slow_init
from tests.fixtures.up_process import UpProcess, with_params
from tests.integration.faults.process_tree import descendants, wait_all_gone

pytestmark = pytest.mark.integration


def _post(url: str, name: str, body: dict[str, object]) -> requests.Response | Exception:
    try:
        return requests.post(f"{url}/v2/models/{name}/infer", json=body, timeout=60)
    except requests.ConnectionError as exc:
        return exc


def test_sigkill_with_requests_held_and_in_flight_resets_clients_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    with_params(make_slow_init(tmp_path, "waking", delay_s=20.0), activation_timeout_s=60)
    with_params(make_execution_recorder(tmp_path, "busy"), direct_connections="false")
    up = UpProcess(tmp_path, "--warm-pool", "1", "--preload-frameworks", "", "--no-image-build")
    pool = ThreadPoolExecutor(max_workers=6)
    try:
        busy = {"inputs": [{"name": "DELAY_S", "datatype": "FP32", "shape": [1], "data": [30]}]}
        waking = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}]}
        in_flight = [pool.submit(_post, up.url, "busy", busy) for _ in range(2)]
        held = [pool.submit(_post, up.url, "waking", waking) for _ in range(3)]
        up.wait_for(lambda: (tmp_path / "busy" / "executions").exists(), 30, "busy executing")
        up.wait_for(lambda: up.model("waking")["held_requests"] == 3, 30, "3 held requests")
        tree = descendants(up.proc.pid)
        assert len(tree) >= 3  # the fork server, a replica per model (and pool processes)
        os.kill(up.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        outcomes = [f.result(30) for f in in_flight + held]
        answered_s = time.monotonic() - killed
        assert all(isinstance(o, requests.ConnectionError) for o in outcomes), outcomes
        assert answered_s < 5, f"clients learned of the kill after {answered_s:.2f} s"
        left = wait_all_gone(tree, 15)
        assert not left, f"processes outlived a SIGKILLed thaw up: {left}"
        print(f"clients reset in {answered_s:.2f} s; {len(tree)} processes gone")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        up.stop()
