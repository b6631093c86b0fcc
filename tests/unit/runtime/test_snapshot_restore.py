"""Restoring models from snapshot images gives the same outputs as loading their files."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from runtime.config import ServeConfig
from runtime.inference import InferRequest, InferTensor
from runtime.metrics import Metrics
from runtime.model_manager import ModelManager
from tests.fixtures.models import (
    make_onnx_add,
    make_torch_export_linear,
    make_torchscript_linear,
)

snapshotter = pytest.importorskip("snapshotter")

CASES = [
    ("onnx_add", "INPUT0", (3, 4)),
    ("torch_linear", "INPUT__0", (3, 8)),
    ("torch_export_linear", "INPUT__0", (3, 8)),
]
ALL = {model: 1.0 for model, _, _ in CASES}
NONE = {model: 0.0 for model, _, _ in CASES}


def _repo_with_images(tmp_path: Path) -> tuple[Path, Path]:
    repo, store = tmp_path / "repo", tmp_path / "store"
    repo.mkdir()
    make_onnx_add(repo)
    make_torchscript_linear(repo)
    make_torch_export_linear(repo)
    image_store = snapshotter.open_store(str(store))
    for model, _, _ in CASES:
        snapshotter.build_image(repo / model / "1", image_store)
    return repo, store


def _restored(metrics: Metrics, model: str) -> float:
    text = metrics.exposition().decode()
    found = re.search(
        rf'thaw_model_restored_from_snapshot{{model="{model}",version="1"}} (\S+)', text
    )
    assert found, text
    return float(found.group(1))


async def _outputs(
    repo: Path, store: Path | None
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Each model's output for a fixed input, and whether it was restored from an image."""
    metrics = Metrics()
    config = ServeConfig(repository=repo, store=str(store) if store else None)
    manager = ModelManager(config, metrics=metrics)
    await manager.start()
    try:
        assert manager.is_ready(), await manager.index()
        results = {}
        for model, name, shape in CASES:
            x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
            response = await manager.infer(
                InferRequest(model, "", [InferTensor(name, "FP32", shape, x)])
            )
            results[model] = response.outputs[0].data
        return results, {model: _restored(metrics, model) for model, _, _ in CASES}
    finally:
        await manager.stop()


async def test_restored_models_answer_exactly_like_file_loads(tmp_path: Path) -> None:
    repo, store = _repo_with_images(tmp_path)
    expected, plain = await _outputs(repo, None)
    restored, from_image = await _outputs(repo, store)
    for model, _, _ in CASES:
        np.testing.assert_array_equal(restored[model], expected[model])
    assert from_image == ALL
    assert plain == NONE


async def test_stale_image_is_ignored_and_files_load(tmp_path: Path) -> None:
    repo, store = _repo_with_images(tmp_path)
    import onnx
    from onnx import numpy_helper

    onnx_path = repo / "onnx_add" / "1" / "model.onnx"
    model = onnx.load(str(onnx_path))
    weight = numpy_helper.to_array(model.graph.initializer[0]) + 1.0
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(weight.astype(np.float32), "W"))
    onnx.save(model, str(onnx_path))  # the ONNX files changed: its image is stale

    restored, from_image = await _outputs(repo, store)
    assert from_image == ALL | {"onnx_add": 0.0}
    x = np.random.default_rng(7).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(restored["onnx_add"], x + weight, rtol=1e-6)


async def test_corrupt_image_falls_back_to_files(tmp_path: Path) -> None:
    repo, store = _repo_with_images(tmp_path)
    expected, _ = await _outputs(repo, None)
    for chunk in store.rglob("*"):
        if chunk.is_file() and "manifest" not in chunk.name and chunk.stat().st_size > 64:
            chunk.write_bytes(b"\x00" * chunk.stat().st_size)  # same size, wrong digest
    restored, from_image = await _outputs(repo, store)
    for model, _, _ in CASES:
        np.testing.assert_array_equal(restored[model], expected[model])
    assert from_image == NONE


def test_bad_store_setting_is_a_clear_error(tmp_path: Path) -> None:
    from runtime.errors import ServingError

    with pytest.raises(ServingError, match="cannot open snapshot store 's3://'"):
        ModelManager(ServeConfig(repository=tmp_path, store="s3://"), metrics=Metrics())
