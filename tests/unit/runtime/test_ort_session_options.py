"""A model's onnxruntime session settings, read as Triton's onnxruntime backend reads them
(optimization.graph.level, execution_mode, intra/inter_op_thread_count, enable_mem_arena,
enable_mem_pattern, memory.enable_memory_arena_shrinkage), set on a real session, and a model
loaded with all of them answering as without them."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from runtime.config import ServeConfig
from runtime.errors import RepositoryError
from runtime.inference import InferRequest, InferTensor
from runtime.model_config import ort_settings, parse_config
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from tests.fixtures.onnx_models import make_onnx_add
from tritonconfig.ort_session_options import OrtSettings


def _config(extra: str = "", **params: str) -> str:
    text = f'name: "m" backend: "onnxruntime"\n{extra}\n'
    for key, value in params.items():
        text += f'parameters: {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
    return text


def _read(extra: str = "", **params: str) -> OrtSettings:
    return ort_settings(parse_config(_config(extra, **params), "m"), 2)


def test_the_graph_level_maps_as_tritons() -> None:
    assert _read().graph_level == "ORT_ENABLE_ALL"
    levels = ((-1, "ORT_ENABLE_BASIC"), (1, "ORT_ENABLE_EXTENDED"), (2, "ORT_DISABLE_ALL"),
              (0, "ORT_ENABLE_ALL"), (7, "ORT_ENABLE_ALL"))  # fmt: skip
    for level, member in levels:
        got = _read(f"optimization {{ graph {{ level: {level} }} }}")
        assert got.graph_level == member
        assert got.all_optimizations is (member == "ORT_ENABLE_ALL")


def test_values_and_refusals_in_tritons_words() -> None:
    got = _read(execution_mode="1", intra_op_thread_count="0", inter_op_thread_count="3",
                enable_mem_arena="0", enable_mem_pattern="true",
                **{"memory.enable_memory_arena_shrinkage": "cpu:0"})  # fmt: skip
    want = OrtSettings(parallel=True, intra_op_threads=0, inter_op_threads=3, mem_arena=False,
                       mem_pattern=True, arena_shrinkage="cpu:0")  # fmt: skip
    assert got == want
    assert _read().inter_op_threads == 1 and _read().mem_arena is None
    with pytest.raises(RepositoryError, match=r"execution_mode are 0 or 1 but got 2 \."):
        _read(execution_mode="2")
    with pytest.raises(RepositoryError, match="failed to convert 'many' to integral number"):
        _read(intra_op_thread_count="many")
    with pytest.raises(RepositoryError, match="failed to convert 'maybe' to boolean value"):
        _read(enable_mem_arena="maybe")


def test_the_settings_reach_a_real_session() -> None:
    options = ort.SessionOptions()
    settings = OrtSettings(graph_level="ORT_ENABLE_BASIC", parallel=True, intra_op_threads=1,
                           inter_op_threads=2, mem_arena=False, mem_pattern=False,
                           arena_shrinkage="cpu:0")  # fmt: skip
    settings.apply(options, ort)
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 2)
    assert options.enable_cpu_mem_arena is False and options.enable_mem_pattern is False
    run = settings.run_options(ort)
    assert run.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    assert OrtSettings().run_options(ort) is None


async def test_a_model_with_every_setting_answers_as_without(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runtime.backends.onnxruntime_backend")
    plain = make_onnx_add(tmp_path, "plain")
    tuned = make_onnx_add(tmp_path, "tuned")
    (tuned / "1" / "model.onnx").write_bytes((plain / "1" / "model.onnx").read_bytes())
    config = tuned / "config.pbtxt"
    config.write_text(config.read_text().replace('"plain"', '"tuned"') + _config(
        "optimization { graph { level: -1 } }", execution_mode="1", inter_op_thread_count="2",
        enable_mem_arena="1", enable_mem_pattern="0",
        **{"memory.enable_memory_arena_shrinkage": "cpu:0"},
    ).split("\n", 1)[1])  # fmt: skip
    manager = ModelManager(ServeConfig(repository=tmp_path), metrics=Metrics())
    await manager.start()
    try:
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        answers = []
        for name in ("plain", "tuned"):
            tensor = InferTensor("INPUT0", "FP32", x.shape, x)
            response = await manager.infer(InferRequest(name, "", [tensor]))
            answers.append(response.outputs[0].data)
    finally:
        await manager.stop()
    np.testing.assert_array_equal(answers[0], answers[1])
    assert "model=tuned onnxruntime session: ORT_ENABLE_BASIC, parallel execution" in caplog.text
