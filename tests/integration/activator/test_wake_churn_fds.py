"""Scale-up/down churn leaves no file descriptor behind in `thaw up` (found by the soak,
benchmarks/soak.py: two pipe fds stayed open per forked pool process)."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest
import requests

from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration

_BODY = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                     "data": [1.0, 2.0, 3.0, 4.0]}]}  # fmt: skip


def _quiet_fds(up: UpProcess) -> int:
    """The activator's open fds once the model is at zero and the pool is back at one idle
    process (fewest of three readings)."""

    def quiet() -> bool:
        status = up.get("/thaw/status")
        pool = status["warm_pool"]
        cold = all(m["state"] == "cold" for m in status["models"])
        return cold and pool["ready"] == pool["size"] == 1 and pool["starting"] == 0

    up.wait_for(quiet, 60, "the model at zero and one idle pool process")
    proc = psutil.Process(up.proc.pid)
    counts = []
    for _ in range(3):
        counts.append(proc.num_fds())
        time.sleep(0.2)
    return min(counts)


def test_waking_and_scaling_to_zero_again_and_again_leaks_no_fds(tmp_path: Path) -> None:
    make_onnx_add(tmp_path / "repo", "onnx_a")
    up = UpProcess(
        tmp_path / "repo", "--warm-pool", "1", "--pool-window-s", "0",
        "--preload-frameworks", "onnxruntime", "--no-image-build",
        "--cache", str(tmp_path / "cache"), "--scale-to-zero-grace-s", "0.5",
        "--stable-window-s", "6", "--log-level", "info",
    )  # fmt: skip
    try:
        start = _quiet_fds(up)
        for _ in range(4):  # each wake claims a forked pool process; each refill forks one
            r = requests.post(f"{up.url}/v2/models/onnx_a/infer", json=_BODY, timeout=60)
            assert r.status_code == 200, r.text
            end = _quiet_fds(up)
        starts = up.get("/thaw/status")["warm_pool"]["starts"]
    finally:
        up.stop()
    assert starts >= 5  # the first pool process and four refills: churn really happened
    assert end - start <= 1, f"activator fds {start} -> {end} after 4 wakes"
