"""`--metrics-config`: Triton's latency summaries in `/metrics`, and its counters turned off."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from runtime.config import ServeConfig
from runtime.inference import InferRequest, InferTensor
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from tests.fixtures.onnx_models import make_onnx_identity
from thawserver.metrics_config_flags import MetricsSettings

_SUMMARIES = (
    "nv_inference_request_summary_us",
    "nv_inference_queue_summary_us",
    "nv_inference_compute_input_summary_us",
    "nv_inference_compute_infer_summary_us",
    "nv_inference_compute_output_summary_us",
)


async def _served(tmp_path: Path, settings: MetricsSettings, requests: int) -> str:
    make_onnx_identity(tmp_path, "ident")
    metrics = Metrics(settings=settings)
    manager = ModelManager(
        ServeConfig(repository=tmp_path, metrics_settings=settings), metrics=metrics
    )
    await manager.start()
    try:
        data = np.ones((1, 2), np.float32)
        for _ in range(requests):
            await manager.infer(
                InferRequest("ident", "", [InferTensor("INPUT0", "FP32", data.shape, data)])
            )
        return metrics.exposition().decode()
    finally:
        await manager.stop()


async def test_summaries_carry_the_quantiles_asked_for_and_every_request(tmp_path: Path) -> None:
    settings = MetricsSettings(summary_latencies=True, summary_quantiles=((0.1, 0.0), (0.75, 0.01)))
    text = await _served(tmp_path, settings, requests=4)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in _SUMMARIES:
        assert families[name].type == "summary"
        samples = {
            (s.name, s.labels.get("quantile")): s.value
            for s in families[name].samples
            if s.labels["model"] == "ident"
        }
        assert samples[(f"{name}_count", None)] == 4
        assert {q for _, q in samples if q} == {"0.1", "0.75"}
    assert 'quantile="0.75"' in text  # the label as Triton's dashboards match it
    assert "nv_inference_request_duration_us{" in text  # counters stay by default
    assert "nv_cache_hit_summary_per_model" not in text  # the model does not use the cache


async def test_counter_latencies_false_drops_the_duration_counters_only(tmp_path: Path) -> None:
    text = await _served(tmp_path, MetricsSettings(counter_latencies=False), requests=1)
    assert "_duration_us" not in text
    assert 'nv_inference_count{model="ident",version="1"} 1\n' in text
    assert "_summary_us" not in text  # summaries are off by default
