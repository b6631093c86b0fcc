"""Backends on a GPU: weights as views of the device arena, CUDA graphs, ORT CUDA, plans, NVML."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


async def _serve(
    repo: Path, cache: Path, name: str, x: np.ndarray, input_name: str, look: Callable[[Any], Any]
) -> tuple[np.ndarray, Any]:
    """One inference, and what `look` reads inside the loaded instance while it is loaded
    (stopping the manager unloads it: its module is gone afterwards)."""
    config = ServeConfig(repository=repo, model_control_mode=ModelControlMode.EXPLICIT, cache=cache)
    loader = ImageLoader(None, cache, "cpu")
    manager = ModelManager(config, metrics=Metrics(), image_loader=loader)
    await manager.start()
    try:
        await manager.load(name)
        response = await manager.infer(
            InferRequest(name, "", [InferTensor(input_name, "FP32", x.shape, x)])
        )
        return response.outputs[0].data, look(manager.instances(name, "1")[0])
    finally:
        await manager.stop()


def test_torch_parameters_are_views_of_the_device_arena(tmp_path: Path) -> None:
    repo, cache = _repo(tmp_path)
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)

    def look(instance: Any) -> tuple[bool, list[bool]]:
        return instance.used_image, [p.is_cuda for p in instance._module.parameters()]

    got, (used_image, on_cuda) = asyncio.run(_serve(repo, cache, "linear", x, "INPUT__0", look))
    cpu = torch.jit.load(str(repo / "linear" / "1" / "model.pt"))
    np.testing.assert_allclose(got, cpu(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    assert used_image
    assert on_cuda and all(on_cuda)


def test_cuda_graphs_replay_with_eager_results(tmp_path: Path) -> None:
    repo, cache = _repo(
        tmp_path, "optimization { cuda { graphs: true graph_spec [ { batch_size: 2 } ] } }\n"
    )
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    got, captured = asyncio.run(
        _serve(repo, cache, "linear", x, "INPUT__0", lambda i: i._module.captured)
    )
    assert captured == 1
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

    def look(instance: Any) -> tuple[bool, list[str]]:
        return instance.used_image, instance._session.get_providers()

    got, (used_image, providers) = asyncio.run(_serve(repo, cache, "add", x, "INPUT0", look))
    assert used_image and providers[0] == "CUDAExecutionProvider"
    weight = ImageLoader(None, cache, "cpu").restore(ImageRef("add", "1", "cpu")).tensors["W"]
    np.testing.assert_allclose(got, x + weight, rtol=1e-5)


def test_nvml_reads_this_gpu() -> None:
    pytest.importorskip("pynvml")
    from thawserver.gpu_metrics import NvmlReader

    samples = NvmlReader().samples()
    assert samples and samples[0].uuid.startswith("GPU-") and samples[0].memory_total_bytes > 0
