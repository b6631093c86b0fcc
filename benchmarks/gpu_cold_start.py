"""The device check's cold starts: a TorchScript model loaded into the GPU the classic way,
beside Thaw restoring it from the page cache and from the host tier through a ModelManager."""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import gpu_models
from benchmarks.gpu_manager import fallbacks
from benchmarks.gpu_row import Row
from benchmarks.gpu_warm_process import DEVICE, ring_loader, timed, warm_page_cache, warm_pool


async def manager_cold_start(
    repo: Path,
    name: str,
    x: np.ndarray,
    *,
    host_tier: bool,
    cache: Path,
    input_name: str,
    pool: Any,
) -> tuple[float, float, np.ndarray, tuple[bool, float]]:
    """(load s, first inference s, output, (restored?, fallbacks)) through a ModelManager on
    cuda, with `pool` as a CUDA-ready warm process's pinned staging
    (`--pinned-memory-pool-byte-size`)."""
    from runtime.config import ModelControlMode, ServeConfig
    from runtime.inference import InferRequest, InferTensor
    from runtime.models.manager import ModelManager
    from runtime.observe.metrics import Metrics
    from snapshotter import ImageRef
    from snapshotter.image_ref import resolve_target

    config = ServeConfig(
        repository=repo, model_control_mode=ModelControlMode.EXPLICIT, cache=cache, target="cuda"
    )
    target = resolve_target("cuda")
    tier = Path("/dev/shm") / f"thaw-gpu-check-{os.getpid()}" if host_tier else None
    loader = ring_loader(
        cache, target, pool, host_cache_dir=tier, host_max_bytes=1 << 40 if host_tier else 0
    )
    metrics = Metrics()
    manager = ModelManager(config, metrics=metrics, image_loader=loader)
    await manager.start()
    try:
        if host_tier:  # fill the host tier, then scale to zero
            await manager.load(name)
            await manager.unload(name)
            # The restore publishes in the background; have it done before the timed load
            # (and not copying 4 GiB beside it).
            await asyncio.to_thread(loader.keep_in_host_tier, ImageRef(name, "1", target))
            await asyncio.to_thread(loader.host.wait_published, 120.0)
            gc.collect()
        request = InferRequest(name, "", [InferTensor(input_name, "FP32", x.shape, x)])
        t0 = time.perf_counter()
        await manager.load(name)
        t1 = time.perf_counter()
        response = await manager.infer(request)
        t2 = time.perf_counter()
        text = metrics.exposition().decode()
        restored = f'thaw_model_restored_from_snapshot{{model="{name}",version="1"}} 1.0' in text
        return t1 - t0, t2 - t1, response.outputs[0].data, (restored, fallbacks(text, name))
    finally:
        await manager.stop()
        if tier is not None:
            await asyncio.to_thread(loader.host.wait_published, 120.0)  # then nothing writes there
            shutil.rmtree(tier, ignore_errors=True)


def cold_start_rows(torch: Any, work: Path, gib: float) -> list[Row]:
    from snapshotter import build_image
    from snapshotter.image_ref import resolve_target
    from snapshotter.stores.dir_store import DirStore

    repo, cache = work / "models", work / "model-cache"
    model = gpu_models.torchscript_mlp(repo, "mlp", gib)
    if not (work / "mlp.built").exists():
        build_image(model / "1", DirStore(cache), target=resolve_target("cuda"))
        (work / "mlp.built").touch()
    warm_page_cache(cache)
    x = np.random.default_rng(2).standard_normal((1, 8192)).astype(np.float32)
    cpu = torch.jit.load(str(model / "1" / "model.pt"), map_location="cpu")
    with torch.inference_mode():
        want = cpu(torch.from_numpy(x)).numpy()
    del cpu
    classic, _ = timed(torch, lambda: _classic(torch, model / "1" / "model.pt", x))
    rows = [
        Row(
            f"cold start {gib:g} GiB TorchScript, classic",
            f"{classic:.2f} s",
            "torch.jit.load(map_location=cuda) + 1st inference",
        )
    ]
    for host_tier in (False, True):
        load_s, first_s, got, restored = asyncio.run(
            manager_cold_start(
                repo,
                "mlp",
                x,
                host_tier=host_tier,
                cache=cache,
                input_name="INPUT__0",
                pool=warm_pool(),
            )
        )
        where = "host tier" if host_tier else "page cache"
        rows.append(
            Row(
                f"cold start {gib:g} GiB TorchScript, thaw from the {where}",
                f"{load_s + first_s:.2f} s (load {load_s:.2f} + 1st {first_s:.3f})",
                f"{classic / (load_s + first_s):.1f}x faster than classic",
                f"restored={restored[0]}, fallbacks={restored[1]:g}",
                ok=restored[0] and restored[1] == 0,
            )
        )
        same = bool(np.allclose(got, want, rtol=1e-3, atol=1e-3))
        rows.append(
            Row(
                f"outputs on the GPU ({where}) == CPU",
                f"max |diff| {np.abs(got - want).max():.2e}",
                "torch on CPU",
                "ok" if same else "MISMATCH",
                ok=same,
            )
        )
        gc.collect()
    return rows


def _classic(torch: Any, path: Path, x: np.ndarray) -> Any:
    module = torch.jit.load(str(path), map_location=DEVICE)
    with torch.inference_mode():
        return module(torch.from_numpy(x).to(DEVICE)).cpu()
