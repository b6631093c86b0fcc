"""Backends on a GPU: weights as views of the device arena, CUDA graphs, ORT CUDA, plans, NVML."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch

from runtime.config import ModelControlMode, ServeConfig
from runtime.inference import InferRequest, InferTensor
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from snapshotter import ImageLoader, ImageRef, build_image
from snapshotter.stores.dir_store import DirStore
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.torch_models import make_torchscript_linear

GPU = "instance_group [ { kind: KIND_GPU count: 1 } ]\n"


def _repo(tmp_path: Path, extra: str = "") -> tuple[Path, Path]:
    repo, cache = tmp_path / "repo", tmp_path / "cache"
    model = make_torchscript_linear(repo, "linear", features=64)
    with (model / "config.pbtxt").open("a") as f:
        f.write(GPU + extra)
    build_image(model / "1", DirStore(cache))
    return repo, cache


async def _serve(repo: Path, cache: Path, name: str, x: np.ndarray, input_name: str) -> tuple:
    config = ServeConfig(repository=repo, model_control_mode=ModelControlMode.EXPLICIT, cache=cache)
    loader = ImageLoader(None, cache, "cpu")
    manager = ModelManager(config, metrics=Metrics(), image_loader=loader)
    await manager.start()
    try:
        await manager.load(name)
        response = await manager.infer(
            InferRequest(name, "", [InferTensor(input_name, "FP32", x.shape, x)])
        )
        instance = manager._models[name].versions["1"].instances[0]
        return response.outputs[0].data, instance
    finally:
        await manager.stop()


def test_torch_parameters_are_views_of_the_device_arena(tmp_path: Path) -> None:
    repo, cache = _repo(tmp_path)
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    got, instance = asyncio.run(_serve(repo, cache, "linear", x, "INPUT__0"))
    cpu = torch.jit.load(str(repo / "linear" / "1" / "model.pt"))
    np.testing.assert_allclose(got, cpu(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    assert instance.used_image
    params = list(instance._module.parameters())
    assert params and all(p.is_cuda for p in params)


def test_cuda_graphs_replay_with_eager_results(tmp_path: Path) -> None:
    repo, cache = _repo(
        tmp_path, "optimization { cuda { graphs: true graph_spec [ { batch_size: 2 } ] } }\n"
    )
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    got, instance = asyncio.run(_serve(repo, cache, "linear", x, "INPUT__0"))
    assert instance._module.captured == 1
    cpu = torch.jit.load(str(repo / "linear" / "1" / "model.pt"))
    np.testing.assert_allclose(got, cpu(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_onnxruntime_cuda_from_the_image(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("onnxruntime-gpu not installed")
    repo, cache = tmp_path / "repo", tmp_path / "cache"
    model = make_onnx_add(repo, "add", size=64)
    with (model / "config.pbtxt").open("a") as f:
        f.write(GPU)
    build_image(model / "1", DirStore(cache))
    x = np.ones((1, 64), np.float32)
    got, instance = asyncio.run(_serve(repo, cache, "add", x, "INPUT0"))
    assert instance.used_image and "CUDAExecutionProvider" in instance._session.get_providers()
    weight = ImageLoader(None, cache, "cpu").restore(ImageRef("add", "1", "cpu")).tensors["W"]
    np.testing.assert_allclose(got, x + weight, rtol=1e-5)


def test_nvml_reads_this_gpu() -> None:
    pytest.importorskip("pynvml")
    from runtime.observe.gpu_metrics import NvmlReader

    samples = NvmlReader().samples()
    assert samples and samples[0].uuid.startswith("GPU-") and samples[0].memory_total_bytes > 0
