"""Statistics extension JSON and Prometheus metrics after known traffic."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from runtime.config import ModelControlMode, ServeConfig
from runtime.errors import InvalidInput, ServingError
from runtime.inference import InferRequest, InferTensor
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from runtime.observe.stats import FailureReason, StatsBook
from tests.fakes.loop import HUNG_AFTER_S, eventually
from tests.fixtures.models import make_execute_error, make_slow_execute
from tests.fixtures.onnx_models import make_onnx_identity
from thawwire import model_metrics


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
    # The first execution lasts until the test has seen the two others wait (the hold file),
    # not 0.3 s, which a loaded machine's stalled loop could let pass unseen.
    hold = tmp_path / "slow" / "hold"
    make_slow_execute(tmp_path, "slow", delay_s=0.3, hold_file=hold)
    metrics = Metrics()
    config = ServeConfig(repository=tmp_path, model_control_mode=ModelControlMode.NONE)
    manager = ModelManager(config, metrics=metrics)
    await manager.start()
    try:
        hold.write_text(str(HUNG_AFTER_S))
        tasks = [asyncio.create_task(manager.infer(_req("slow", np.ones(1, np.float32))))
                 for _ in range(3)]  # fmt: skip

        def pending() -> float:
            text = metrics.exposition().decode()
            return _sample(text, "nv_inference_pending_request_count", model="slow", version="1")

        try:
            await eventually(lambda: pending() == 2)  # the first runs, two wait
        finally:
            hold.unlink()
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


# Triton's HELP and TYPE lines, byte for byte (prometheus-cpp: counters without `_total`).
TRITON_HEADERS = """\
# HELP nv_inference_request_failure Number of failed inference requests
# TYPE nv_inference_request_failure counter
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
# HELP nv_inference_count Number of inferences performed (does not include cached requests)
# TYPE nv_inference_count counter
# HELP nv_inference_exec_count Number of model executions performed
# TYPE nv_inference_exec_count counter
# HELP nv_inference_request_duration_us Cumulative inference request duration in microseconds
# TYPE nv_inference_request_duration_us counter
# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds
# TYPE nv_inference_queue_duration_us counter
# HELP nv_inference_compute_input_duration_us Cumulative compute input duration in microseconds
# TYPE nv_inference_compute_input_duration_us counter
# HELP nv_inference_compute_infer_duration_us Cumulative compute inference duration in \
microseconds
# TYPE nv_inference_compute_infer_duration_us counter
# HELP nv_inference_compute_output_duration_us Cumulative inference compute output duration \
in microseconds
# TYPE nv_inference_compute_output_duration_us counter
# HELP nv_inference_pending_request_count Instantaneous number of pending requests
# TYPE nv_inference_pending_request_count gauge
# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]
# TYPE nv_cpu_utilization gauge
# HELP nv_cpu_memory_total_bytes CPU total memory (RAM), in bytes
# TYPE nv_cpu_memory_total_bytes gauge
# HELP nv_cpu_memory_used_bytes CPU used memory (RAM), in bytes
# TYPE nv_cpu_memory_used_bytes gauge
"""


def _metrics_for(model: str) -> Metrics:
    """Metrics over one version of `model` with one success and one backend failure."""
    book = StatsBook()
    stats = book.open(model, "1")
    stats.record_execution(2, [(True, 2, 5_000, 40_000)], (1_000, 20_000, 3_000))
    stats.record_failure(FailureReason.BACKEND, 7_000)
    metrics = Metrics()
    metrics.bind(book, lambda: {(model, "1"): 3})
    return metrics


def test_triton_families_keep_their_names_help_and_type() -> None:
    text = _metrics_for("add_sub").exposition().decode()
    headers = [line for line in text.splitlines() if line.startswith("# ") and " nv_" in line]
    assert "\n".join(headers) + "\n" == TRITON_HEADERS
    triton = text.split("# HELP thaw_")[0]
    assert not re.search(r"_total[ {]", triton)  # no Triton name has the `_total` suffix
    assert _sample(text, "nv_inference_count", model="add_sub", version="1") == 2
    assert _sample(text, "nv_inference_request_duration_us", model="add_sub", version="1") == 40
    assert (
        _sample(text, "nv_inference_compute_infer_duration_us", model="add_sub", version="1") == 20
    )
    assert (
        _sample(
            text, "nv_inference_request_failure", model="add_sub", reason="BACKEND", version="1"
        )
        == 1
    )
    assert _sample(text, "nv_inference_pending_request_count", model="add_sub", version="1") == 3


def test_label_values_with_newlines_quotes_and_backslashes_are_escaped() -> None:
    name = 'odd"name\\with\nnewline'
    text = _metrics_for(name).exposition().decode()
    assert 'nv_inference_count{model="odd\\"name\\\\with\\nnewline",version="1"} 2\n' in text
    # A Prometheus parser reads every sample back with the exact name.
    families = list(text_string_to_metric_families(text))
    models = {s.labels["model"] for f in families for s in f.samples if "model" in s.labels}
    assert models == {name}
    counts = {f.name: len(f.samples) for f in families if f.name.startswith("nv_inference")}
    assert counts["nv_inference_request_failure"] == len(FailureReason)
    assert counts["nv_inference_count"] == 1 and counts["nv_inference_pending_request_count"] == 1


def _server_memory() -> float:
    text = Metrics().exposition().decode()
    found = re.search(r"^thaw_server_resident_memory_bytes (\S+)$", text, re.M)
    assert found, text
    return float(found.group(1))


def test_server_memory_counts_this_process_and_its_children() -> None:
    """What the replica-memory alert watches: a Python-backend instance runs in a child
    process, and its memory must count."""
    alone = _server_memory()
    assert alone >= psutil.Process().memory_info().rss * 0.9
    script = "import sys; b = bytearray(64 << 20); print(flush=True); sys.stdin.read()"
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        child.stdout.readline()  # its 64 MiB are allocated (and touched: bytearray zeroes)
        assert _server_memory() > alone + (48 << 20)
    finally:
        child.communicate(b"")


def test_the_failure_reasons_are_the_ones_thaw_up_reports_at_zero() -> None:
    # thaw up writes zeroed series for a model at zero from thawwire.model_metrics: the same
    # reasons, so a model's series do not change shape at its first replica.
    assert tuple(r.value for r in FailureReason) == model_metrics.FAILURE_REASONS
