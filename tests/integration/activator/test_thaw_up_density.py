"""Shared placement under a real `thaw up`: models share one replica process within its budget;
the least recently used idle one is evicted to the host tier and woken from it; a busy one is
never evicted (another replica is started instead)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.fixtures.models import make_slow_request
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.up_process import UpProcess, pid_alive, with_params

pytestmark = pytest.mark.integration

MiB = 1 << 20
SIZE = MiB  # floats per ONNX model: 4 MiB of weights each
EVICT_GRACE_S = 0.5


def _up(repo: Path, tmp_path: Path, *extra: str, budget_bytes: int) -> UpProcess:
    return UpProcess(
        repo, "--warm-pool", "1", "--preload-frameworks", "onnxruntime",
        "--cache", str(tmp_path / "cache"), "--host-cache-bytes", str(256 * MiB),
        "--shared-replica-bytes", str(budget_bytes), "--shared-model-overhead-bytes", "0",
        "--evict-grace-s", str(EVICT_GRACE_S), "--log-level", "info", *extra,
    )  # fmt: skip


def _built(up: UpProcess, models: list[str]) -> None:
    up.wait_for(
        lambda: all(up.get("/thaw/status")["image_builds"].get(m) == "built" for m in models),
        180,
        "the start-up image builds",
    )


async def _infer(session: aiohttp.ClientSession, up: UpProcess, model: str) -> int:
    body: dict[str, Any] = {
        "inputs": [{"name": "INPUT0", "shape": [1, SIZE], "datatype": "FP32",
                    "data": [1.0] * SIZE}]
    }  # fmt: skip
    async with session.post(f"{up.url}/v2/models/{model}/infer", json=body) as resp:
        await resp.read()
        return resp.status


def _shared(up: UpProcess) -> dict[str, Any]:
    shared: dict[str, Any] = up.get("/thaw/status")["shared"]
    return shared


def _hosts(up: UpProcess) -> dict[str, list[str]]:
    """Shared replica id -> the models it holds."""
    return {r["id"]: r["models"] for r in _shared(up)["replicas"]}


def _metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _idle_past_grace() -> None:
    """Let the eviction grace pass (a setting of this test's `thaw up`, not a measurement)."""
    time.sleep(EVICT_GRACE_S + 0.2)


async def test_models_share_a_replica_and_the_idle_one_is_evicted_and_rewoken_from_ram(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    for name in ("onnx_a", "onnx_b", "onnx_c"):
        # A long scale-to-zero grace: the only way out of the shared replica is eviction.
        with_params(make_onnx_add(repo, name, size=SIZE), placement="shared",
                    scale_to_zero_grace_s=600)  # fmt: skip
    # Room for two of the three 4 MiB models (plus their files' few bytes of graph).
    up = _up(repo, tmp_path, budget_bytes=9 * MiB)
    try:
        _built(up, ["onnx_a", "onnx_b", "onnx_c"])
        async with aiohttp.ClientSession() as session:
            assert await _infer(session, up, "onnx_a") == 200
            assert await _infer(session, up, "onnx_b") == 200
            hosts = _hosts(up)
            assert list(hosts.values()) == [["onnx_a", "onnx_b"]], hosts
            (host,) = hosts
            pids = {up.model(m)["replicas"][0]["pid"] for m in ("onnx_a", "onnx_b")}
            assert len(pids) == 1  # one process serves both

            _idle_past_grace()
            assert await _infer(session, up, "onnx_c") == 200
            # onnx_a was the least recently used: it made room, in the same process.
            assert _hosts(up) == {host: ["onnx_b", "onnx_c"]}
            assert up.model("onnx_a")["replicas_ready"] == 0
            assert up.model("onnx_c")["replicas"][0]["pid"] in pids
            assert _shared(up)["models"]["onnx_a"]["evictions"] == 1

            _idle_past_grace()
            assert await _infer(session, up, "onnx_a") == 200  # woken again: onnx_b goes
            assert _hosts(up) == {host: ["onnx_a", "onnx_c"]}
        counts = _shared(up)["models"]
        # Both its loads (the start-up build left its image in the host tier too) and its
        # re-wake after the eviction came from the host tier (RAM): the unload kept the image.
        assert counts["onnx_a"]["loads"] == {"host": 2}, counts
        assert counts["onnx_b"]["evictions"] == 1 and counts["onnx_c"]["evictions"] == 0
        metrics = up.metrics()
        assert _metric(metrics, 'thaw_shared_evictions_total{model="onnx_a"}') == 1
        assert _metric(metrics, 'thaw_shared_loads_total{model="onnx_a",source="host"}') == 2
        assert _metric(metrics, f'thaw_shared_model_placement{{model="onnx_c",replica="{host}"}}')
        table = (
            await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "thaw.cli", "status", "--url", up.url],
                capture_output=True, text=True, timeout=30,
            )
        ).stdout  # fmt: skip
        assert host in table and "onnx_a, onnx_c" in table, table
    finally:
        assert up.stop() == 0


async def test_a_busy_model_is_never_evicted_another_replica_is_started(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    busy = make_slow_request(repo, "busy")
    (busy / "1" / "weights.bin").write_bytes(b"\0" * (4 * MiB))  # it costs 4 MiB
    # One replica of it (a 20 s request is a burst to the autoscaler otherwise).
    with_params(busy, placement="shared", scale_to_zero_grace_s=600, max_replicas=1)
    with_params(make_onnx_add(repo, "onnx_a", size=SIZE), placement="shared",
                scale_to_zero_grace_s=600)  # fmt: skip
    up = _up(repo, tmp_path, budget_bytes=6 * MiB)  # room for one of them
    try:
        _built(up, ["onnx_a"])
        async with aiohttp.ClientSession() as session:
            body = {"inputs": [{"name": "DELAY_S", "shape": [1], "datatype": "FP32",
                                "data": [20.0]}]}  # fmt: skip
            slow = asyncio.ensure_future(session.post(f"{up.url}/v2/models/busy/infer", json=body))
            started = busy / "started"
            await asyncio.to_thread(
                up.wait_for, lambda: started.exists(), 60, "the request inside the model"
            )
            _idle_past_grace()  # its last request is older than the grace: only in-flight counts
            assert await _infer(session, up, "onnx_a") == 200
            hosts = _hosts(up)
            assert sorted(hosts.values()) == [["busy"], ["onnx_a"]], hosts
            assert _shared(up)["models"]["busy"]["evictions"] == 0
            assert not slow.done()
            async with await slow as resp:
                assert resp.status == 200
        assert up.model("busy")["replicas_ready"] == 1
        pids = {r["pid"] for r in _shared(up)["replicas"]}
        assert len(pids) == 2
    finally:
        assert up.stop() == 0


async def test_a_shared_replica_whose_models_all_went_to_zero_is_released(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for name in ("onnx_a", "onnx_b"):
        with_params(make_onnx_add(repo, name, size=SIZE), placement="shared",
                    scale_to_zero_grace_s=1)  # fmt: skip
    up = _up(repo, tmp_path, "--shared-release-grace-s", "1", budget_bytes=64 * MiB)
    try:
        _built(up, ["onnx_a", "onnx_b"])
        async with aiohttp.ClientSession() as session:
            assert await _infer(session, up, "onnx_a") == 200
            assert await _infer(session, up, "onnx_b") == 200
            (pid,) = {r["pid"] for r in _shared(up)["replicas"]}  # onnx_a may be gone already
            assert up.model("onnx_b")["replicas"][0]["pid"] == pid
            # Both scale to zero after their own grace; then the process goes after its own.
            up.wait_for(lambda: _shared(up)["replicas"] == [], 60, "the shared replica released")
            up.wait_for(lambda: not pid_alive(pid), 30, "the released process to exit")
            assert {up.model(m)["state"] for m in ("onnx_a", "onnx_b")} == {"cold"}
            # The host tier kept the image: the next wake is a restore from RAM again.
            assert await _infer(session, up, "onnx_a") == 200
        assert _shared(up)["models"]["onnx_a"]["loads"] == {"host": 2}
        assert _shared(up)["models"]["onnx_a"]["evictions"] == 0
    finally:
        assert up.stop() == 0
