"""`thaw up`'s warm pool forked by a fork server: sized to demand, memory reported, tiers wired."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.fixtures.models import make_add_sub
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration


def _body(model: str) -> dict[str, object]:
    if model.startswith("onnx"):
        return {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                            "data": [1.0, 2.0, 3.0, 4.0]}]}  # fmt: skip
    return {"inputs": [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1.0, 1.0, 1.0, 1.0]},
    ]}  # fmt: skip


def _metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.MULTILINE)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for name in ("onnx_a", "onnx_b"):
        make_onnx_add(repo, name)
    make_add_sub(repo, "py_c")
    return repo


async def test_models_waking_together_are_served_and_the_pool_grows_to_the_demand(
    repo: Path, tmp_path: Path
) -> None:
    up = UpProcess(
        repo, "--warm-pool", "1", "--preload-frameworks", "onnxruntime,torch",
        "--cache", str(tmp_path / "cache"), "--host-cache-bytes", str(64 << 20),
        "--log-level", "info",
    )  # fmt: skip
    try:
        pool = up.get("/thaw/status")["warm_pool"]
        assert pool["source"] == "fork-server" and pool["ready"] >= 1  # ready means primed
        up.wait_for(
            lambda: (
                up.get("/thaw/status")["image_builds"]
                == {"onnx_a": "built", "onnx_b": "built", "py_c": "no weights"}
            ),
            120,
            "the start-up image builds",
        )
        async with aiohttp.ClientSession() as session:

            async def infer(model: str) -> tuple[int, dict[str, object]]:
                url = f"{up.url}/v2/models/{model}/infer"
                async with session.post(url, json=_body(model)) as r:
                    return r.status, await r.json()

            results = await asyncio.wait_for(
                asyncio.gather(*(infer(m) for m in ("onnx_a", "onnx_b", "py_c"))), 120
            )
        assert [status for status, _ in results] == [200, 200, 200]
        outputs = {o["name"]: o["data"] for o in results[2][1]["outputs"]}  # type: ignore[union-attr]
        assert outputs["OUTPUT0"] == [2.0, 3.0, 4.0, 5.0]
        # Three models woke within the window: the pool keeps three idle processes for them.
        up.wait_for(lambda: up.get("/thaw/status")["warm_pool"]["ready"] == 3, 60, "a pool of 3")
        up.wait_for(
            lambda: (
                len(up.get("/thaw/status")["warm_pool"]["idle_pss_bytes"]) == 3
                and all(b > 0 for b in up.get("/thaw/status")["warm_pool"]["idle_pss_bytes"])
            ),
            30,
            "the idle processes' PSS",
        )
        pool = up.get("/thaw/status")["warm_pool"]
        assert pool["size"] == 3 and pool["demand"] == 3 and pool["limit"] == "demand"
        assert pool["server_pss_bytes"] > 0 and pool["last_start_s"] > 0
        up.wait_for(  # /metrics copies the pool's report every autoscaler tick
            lambda: _metric(up.metrics(), 'thaw_warm_pool_processes{state="idle"}') == 3,
            10,
            "the pool metrics",
        )
        metrics = up.metrics()
        assert _metric(metrics, 'thaw_warm_pool_idle_pss_bytes{slot="0"}') > 0
        assert _metric(metrics, "thaw_fork_server_pss_bytes") > 0
        # The replicas restored from images; the host tier keeps them for the next wake.
        up.wait_for(lambda: _metric(up.metrics(), "thaw_host_cache_bytes") > 0, 30, "the host tier")
        assert 'thaw_image_cache_evictions_total{tier="host"} 0\n' in up.metrics()
        table = (
            await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "thaw.cli", "status", "--url", up.url],
                capture_output=True, text=True, timeout=30,
            )
        ).stdout  # fmt: skip
        assert "IMAGE" in table and "built" in table and "no weights" in table
        assert "fork-server" in table and "memory (PSS): idle processes" in table
    finally:
        assert up.stop() == 0


def test_without_the_fork_server_pool_processes_are_spawned(repo: Path) -> None:
    up = UpProcess(repo, "--fork-server", "off", "--preload-frameworks", "", "--no-image-build")
    try:
        pool = up.get("/thaw/status")["warm_pool"]
        assert pool["source"] == "spawn" and pool["ready"] == 1
        assert up.get("/thaw/status")["image_builds"]["onnx_a"] == "unknown"
    finally:
        assert up.stop() == 0
