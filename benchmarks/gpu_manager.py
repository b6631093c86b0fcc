"""A ModelManager on the GPU that a proof loads a model into, asks, and looks inside (its
backends, its fallback counters), and whether its answers match the CPU's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.gpu_row import Row


def fallbacks(metrics_text: str, model: str) -> float:
    """Sum of `thaw_device_fallbacks_total` for `model` in an exposition."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("thaw_device_fallbacks_total{") and f'model="{model}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def instances(manager: Any, name: str) -> list[Any]:
    """The loaded backends of `name`'s latest version (the check looks inside them)."""
    return list(manager.instances(name))


async def with_manager(
    repo: Path,
    name: str,
    fn: Callable[[Any, Any], Awaitable[list[Row]]],
    *,
    target: str = "cuda",
    cache: Path | None = None,
    loader: Any | None = None,
) -> list[Row]:
    """A started ModelManager over `repo` (explicit mode, `target`), `name` loaded, then
    `fn(manager, metrics)`; stopped afterwards."""
    from runtime.config import ModelControlMode, ServeConfig
    from runtime.models.manager import ModelManager
    from runtime.observe.metrics import Metrics

    config = ServeConfig(
        repository=repo, model_control_mode=ModelControlMode.EXPLICIT, cache=cache, target=target
    )
    metrics = Metrics()
    manager = ModelManager(config, metrics=metrics, image_loader=loader)
    await manager.start()
    try:
        await manager.load(name)
        return await fn(manager, metrics)
    finally:
        await manager.stop()


async def infer(manager: Any, name: str, input_name: str, x: np.ndarray) -> np.ndarray:
    from runtime.inference import InferRequest, InferTensor

    request = InferRequest(name, "", [InferTensor(input_name, "FP32", x.shape, x)])
    response = await manager.infer(request)
    return np.asarray(response.outputs[0].data)


def same(got: np.ndarray, want: np.ndarray, tol: float = 1e-3) -> bool:
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=tol, atol=tol))
