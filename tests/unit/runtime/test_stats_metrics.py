"""Statistics extension JSON and Prometheus metrics after known traffic."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import numpy as np
import pytest

from runtime.config import ModelControlMode, ServeConfig
from runtime.errors import InvalidInput, ServingError
from runtime.inference import InferRequest, InferTensor
from runtime.metrics import Metrics
from runtime.model_manager import ModelManager
from tests.fixtures.models import make_execute_error, make_onnx_identity, make_slow_execute


def _sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus exposition (fails if absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if found == labels:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name}{labels}")


def _req(model: str, data: np.ndarray) -> InferRequest:
    return InferRequest(model, "", [InferTensor("INPUT0", "FP32", data.shape, data)])


async def test_statistics_and_metrics_after_known_traffic(tmp_path: Path) -> None:
    make_execute_error(tmp_path, "err")
    make_onnx_identity(tmp_path, "ident")
    metrics = Metrics()
    manager = ModelManager(ServeConfig(repository=tmp_path), metrics=metrics)
    await manager.start()
    try:
        for _ in range(5):
            await manager.infer(_req("err", np.ones(3, np.float32)))
        for _ in range(2):
            with pytest.raises(ServingError):
                await manager.infer(_req("err", -np.ones(3, np.float32)))
        with pytest.raises(InvalidInput):
            await manager.infer(_req("err", np.ones((1, 3), np.float32)))
        await manager.infer(_req("ident", np.ones((3, 2), np.float32)))  # batch of 3

        stats = manager.statistics("err", None)["model_stats"]
        assert len(stats) == 1
        entry = stats[0]
        assert entry["name"] == "err" and entry["version"] == "1"
        assert entry["inference_count"] == 5
        assert entry["execution_count"] == 7
        inference = entry["inference_stats"]
        assert inference["success"]["count"] == 5
        # The refused request (bad shape) never reached the model: like Triton 2.51, not a fail.
        assert inference["fail"]["count"] == 2
        for key in ("queue", "compute_input", "compute_infer", "compute_output"):
            assert inference[key]["count"] == 5
        assert inference["success"]["ns"] >= inference["compute_infer"]["ns"] > 0
        assert entry["last_inference"] > 1_600_000_000_000  # ms since the epoch
        assert entry["batch_stats"][0]["batch_size"] == 1
        assert entry["batch_stats"][0]["compute_infer"]["count"] == 7

        ident = manager.statistics("ident", "1")["model_stats"][0]
        assert ident["inference_count"] == 3 and ident["execution_count"] == 1
        assert ident["batch_stats"][0]["batch_size"] == 3
        assert len(manager.statistics(None, None)["model_stats"]) == 2

        text = metrics.exposition().decode()
        labels = {"model": "err", "version": "1"}
        assert _sample(text, "nv_inference_request_success", **labels) == 5
        assert _sample(text, "nv_inference_count", **labels) == 5
        assert _sample(text, "nv_inference_exec_count", **labels) == 7
        assert _sample(text, "nv_inference_request_failure", reason="BACKEND", **labels) == 2
        assert _sample(text, "nv_inference_request_failure", reason="OTHER", **labels) == 0
        assert _sample(text, "nv_inference_request_failure", reason="REJECTED", **labels) == 0
        assert _sample(text, "nv_inference_count", model="ident", version="1") == 3
        assert _sample(text, "nv_inference_request_duration_us", **labels) > 0
        assert _sample(text, "nv_inference_compute_infer_duration_us", **labels) > 0
        assert "# TYPE nv_inference_count counter" in text
        assert "nv_inference_count_total" not in text
        assert _sample(text, "thaw_model_load_duration_seconds", **labels) > 0
        assert _sample(text, "thaw_model_restored_from_snapshot", **labels) == 0
        assert re.search(r"^nv_cpu_memory_total_bytes \d", text, re.M)
        assert re.search(r"^nv_cpu_utilization \d", text, re.M)
        assert _sample(text, "nv_inference_pending_request_count", **labels) == 0
    finally:
        await manager.stop()
    # Unloaded models leave the statistics and the per-model metrics.
    assert manager.statistics(None, None) == {"model_stats": []}
    assert 'model="err"' not in metrics.exposition().decode().split("thaw_model_load_failures")[0]


async def test_pending_count_shows_queued_requests(tmp_path: Path) -> None:
    make_slow_execute(tmp_path, "slow", delay_s=0.3)
    metrics = Metrics()
    config = ServeConfig(repository=tmp_path, model_control_mode=ModelControlMode.NONE)
    manager = ModelManager(config, metrics=metrics)
    await manager.start()
    try:
        tasks = [asyncio.create_task(manager.infer(_req("slow", np.ones(1, np.float32))))
                 for _ in range(3)]  # fmt: skip
        pending = -1.0
        for _ in range(150):  # bounded: until the first runs and two wait (<= 3 s)
            text = metrics.exposition().decode()
            pending = _sample(text, "nv_inference_pending_request_count", model="slow", version="1")
            if pending == 2:
                break
            await asyncio.sleep(0.02)
        assert pending == 2
        await asyncio.gather(*tasks)
        queue_ns = manager.statistics("slow", None)["model_stats"][0]["inference_stats"]["queue"]
        assert queue_ns["ns"] >= 0.3e9  # the later two waited at least one execution
    finally:
        await manager.stop()


async def test_load_failures_are_counted(tmp_path: Path) -> None:
    bad = make_onnx_identity(tmp_path, "bad")
    (bad / "config.pbtxt").write_text("garbage {")
    metrics = Metrics()
    manager = ModelManager(ServeConfig(repository=tmp_path), metrics=metrics)
    await manager.start()
    await manager.stop()
    assert (
        _sample(metrics.exposition().decode(), "thaw_model_load_failures_total", model="bad") == 1
    )
