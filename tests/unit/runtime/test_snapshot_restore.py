"""Restoring models from snapshot images gives the same outputs as loading their files."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.config import ServeConfig
from runtime.inference import InferRequest, InferTensor
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.torch_models import make_torch_export_linear, make_torchscript_linear
from thaw.cli import main as thaw_main

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
    repo, store = await asyncio.to_thread(_repo_with_images, tmp_path)
    expected, plain = await _outputs(repo, None)
    restored, from_image = await _outputs(repo, store)
    for model, _, _ in CASES:
        np.testing.assert_array_equal(restored[model], expected[model])
    assert from_image == ALL
    assert plain == NONE


async def test_stale_image_is_ignored_and_files_load(tmp_path: Path) -> None:
    repo, store = await asyncio.to_thread(_repo_with_images, tmp_path)
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
    repo, store = await asyncio.to_thread(_repo_with_images, tmp_path)
    expected, _ = await _outputs(repo, None)
    for chunk in store.rglob("*"):
        if chunk.is_file() and "manifest" not in chunk.name and chunk.stat().st_size > 64:
            chunk.write_bytes(b"\x00" * chunk.stat().st_size)  # same size, wrong digest
    restored, from_image = await _outputs(repo, store)
    for model, _, _ in CASES:
        np.testing.assert_array_equal(restored[model], expected[model])
    assert from_image == NONE


def test_restored_torchscript_runs_on_the_arena_itself(tmp_path: Path) -> None:
    """No copy between restore and the first forward: every parameter of the restored module is
    the arena view itself (contiguous, at the image's aligned offset), and its first forward
    (TorchScript's profiling run) equals the file-loaded module's bit for bit."""
    import torch

    from runtime.backends.base import LoadContext
    from runtime.backends.torch_backend import TorchBackend
    from runtime.model_config import parse_config

    repo, store = _repo_with_images(tmp_path)
    model_dir = repo / "torch_linear"
    loader = snapshotter.ImageLoader(str(store), tmp_path / "cache", "cpu")
    ref = loader.find("torch_linear", "1", loader.source_digest(model_dir / "1"))
    assert ref is not None
    arena = snapshotter.Arena(loader.manifest(ref).arena_bytes)
    arena.prefault()
    image = loader.restore(ref, arena)
    config = parse_config((model_dir / "config.pbtxt").read_text(), "config.pbtxt")
    ctx = LoadContext("torch_linear", "1", model_dir / "1", model_dir, config, "KIND_CPU", 0)
    plain, restored = TorchBackend(), TorchBackend()
    plain.load(ctx)
    restored.load(dataclasses.replace(ctx, image=image))
    assert restored.used_image and not plain.used_image

    base = arena.array.ctypes.data
    views = image.torch_tensors()
    for name, tensor in restored._module.named_parameters():
        assert tensor.data_ptr() == views[name].data_ptr()
        assert base <= tensor.data_ptr() < base + arena.nbytes
        assert tensor.is_contiguous() and (tensor.data_ptr() - base) % 4096 == 0
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        for _ in range(3):  # profiling run, optimizing run, optimized graph
            assert torch.equal(restored._module(x), plain._module(x))


def test_bad_store_setting_is_a_clear_error(tmp_path: Path) -> None:
    from runtime.errors import ServingError

    with pytest.raises(ServingError, match="cannot open snapshot store 's3://'"):
        ModelManager(ServeConfig(repository=tmp_path, store="s3://"), metrics=Metrics())


def _make_onnx_conv(repo: Path, name: str = "onnx_conv") -> Path:
    """Conv(16 -> 16, 3x3) + BatchNormalization + Relu: onnxruntime fuses and re-lays it out."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tests.fixtures.models import write_config

    rng = np.random.default_rng(3)

    def init(array: np.ndarray, key: str) -> onnx.TensorProto:
        return numpy_helper.from_array(array.astype(np.float32), key)

    inits = [
        init(rng.standard_normal((16, 16, 3, 3)) * 0.1, "W"),
        init(rng.standard_normal(16), "B"),
        init(rng.random(16) + 0.5, "scale"),
        init(rng.standard_normal(16), "bias"),
        init(rng.standard_normal(16) * 0.1, "mean"),
        init(rng.random(16) + 0.5, "var"),
    ]
    x = helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", 16, 8, 8])
    y = helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", 16, 8, 8])
    nodes = [
        helper.make_node("Conv", ["INPUT0", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["OUTPUT0"]),
    ]
    graph = helper.make_graph(nodes, name, [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (repo / name / "1").mkdir(parents=True)
    onnx.save(model, str(repo / name / "1" / "model.onnx"))
    write_config(
        repo / name,
        f"""
        name: "{name}"
        backend: "onnxruntime"
        max_batch_size: 8
        input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16, 8, 8 ] }} ]
        output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16, 8, 8 ] }} ]
        """,
    )
    return repo / name


async def _one_output(repo: Path, store: Path | None, model: str) -> tuple[np.ndarray, float]:
    metrics = Metrics()
    manager = ModelManager(
        ServeConfig(repository=repo, store=str(store) if store else None), metrics=metrics
    )
    await manager.start()
    try:
        x = np.random.default_rng(7).standard_normal((2, 16, 8, 8)).astype(np.float32)
        response = await manager.infer(
            InferRequest(model, "", [InferTensor("INPUT0", "FP32", (2, 16, 8, 8), x)])
        )
        return response.outputs[0].data, _restored(metrics, model)
    finally:
        await manager.stop()


async def _ort_image(tmp_path: Path, config_extra: str = "") -> tuple[Path, Path, Any]:
    """onnx_conv in `tmp_path/repo` (its config plus `config_extra`), its image built with
    `ort_optimize` into `tmp_path/store`: (repo, store, manifest)."""
    repo, store = tmp_path / "repo", tmp_path / "store"
    repo.mkdir()
    _make_onnx_conv(repo)
    config = repo / "onnx_conv" / "config.pbtxt"
    config.write_text(config.read_text() + config_extra)
    manifest = await asyncio.to_thread(
        snapshotter.build_image,
        repo / "onnx_conv" / "1",
        snapshotter.open_store(str(store)),
        ort_optimize=True,
    )
    return repo, store, manifest


async def test_ort_optimized_image_answers_exactly_like_the_file(tmp_path: Path) -> None:
    repo, store, manifest = await _ort_image(tmp_path)
    assert "onnx_graph_ort" in manifest.artifacts and "onnx_graph" not in manifest.artifacts
    assert manifest.framework_versions["onnxruntime_host"] == snapshotter.ort_host_key()
    # BatchNormalization was folded into the convolution: the image holds other tensors.
    assert {t.name for t in manifest.tensors} != {"W", "B", "scale", "bias", "mean", "var"}
    expected, plain = await _one_output(repo, None, "onnx_conv")
    restored, from_image = await _one_output(repo, store, "onnx_conv")
    assert (plain, from_image) == (0.0, 1.0)
    assert restored.tobytes() == expected.tobytes()


async def test_a_model_asking_fewer_graph_optimizations_keeps_the_portable_graph(
    tmp_path: Path,
) -> None:
    """A config's `optimization { graph { level: 1 } }` (Triton's onnxruntime backend: basic
    and extended only) is kept: no pre-optimized graph in its image, which still serves."""
    repo, store, manifest = await _ort_image(tmp_path, "\noptimization { graph { level: 1 } }\n")
    assert "onnx_graph" in manifest.artifacts and "onnx_graph_ort" not in manifest.artifacts
    expected, _ = await _one_output(repo, None, "onnx_conv")
    restored, from_image = await _one_output(repo, store, "onnx_conv")
    assert from_image == 1.0
    np.testing.assert_allclose(restored, expected, rtol=1e-5, atol=1e-6)


async def test_ort_optimized_image_for_another_host_loads_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, store = tmp_path / "repo", tmp_path / "store"
    repo.mkdir()
    _make_onnx_conv(repo)
    await asyncio.to_thread(
        snapshotter.build_image,
        repo / "onnx_conv" / "1",
        snapshotter.open_store(str(store)),
        ort_optimize=True,
    )
    expected, _ = await _one_output(repo, None, "onnx_conv")
    import importlib

    ort_optimize = importlib.import_module("snapshotter.sources.ort_optimize")
    monkeypatch.setattr(ort_optimize, "host_key", lambda: "0.0.0:other:0000")
    restored, from_image = await _one_output(repo, store, "onnx_conv")
    assert from_image == 0.0
    assert restored.tobytes() == expected.tobytes()


def _loads(metrics: Metrics, model: str) -> dict[str, float]:
    """`thaw_model_loads_total` of one model, by source."""
    pattern = rf'^thaw_model_loads_total{{model="{model}",source="(\w+)"}} (\S+)$'
    found = re.findall(pattern, metrics.exposition().decode(), re.M)
    return {source: float(value) for source, value in found}


async def test_loads_are_counted_by_where_the_weights_came_from(tmp_path: Path) -> None:
    """The image cache's hit ratio (deploy/prometheus/thaw-alerts.yaml) reads these: a restore
    reads a directory store in place (nothing is copied into the node cache by a restore)
    until the image is pulled into the node cache (`thaw snapshot pull`, as `thaw up --store`
    does at start-up), then it hits the cache; a model without an image loads its files."""
    repo, store = await asyncio.to_thread(_repo_with_images, tmp_path)
    cache = tmp_path / "cache"

    async def load_once() -> dict[str, float]:
        metrics = Metrics()
        config = ServeConfig(repository=repo, store=str(store), cache=cache)
        manager = ModelManager(config, metrics=metrics)
        await manager.start()
        await manager.stop()
        return _loads(metrics, "onnx_add")

    assert await load_once() == {"store": 1.0}
    assert await load_once() == {"store": 1.0}  # still read in place
    pull = ["snapshot", "pull", "onnx_add", "--store", str(store), "--cache", str(cache)]
    assert await asyncio.to_thread(thaw_main, pull) == 0
    assert await load_once() == {"cache": 1.0}
    metrics = Metrics()
    manager = ModelManager(ServeConfig(repository=repo), metrics=metrics)
    await manager.start()
    await manager.stop()
    assert _loads(metrics, "onnx_add") == {"files": 1.0}
