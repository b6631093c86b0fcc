"""The device check's proofs that the torch paths, and the runtime around them, ran on the GPU.

Each function returns table rows; `Skipped` says why a row could not run (what is missing on
this machine), anything else raised is a failure. Every proof checks the thing itself, not a
log line: parameters inside the restored device arena, the captured graphs, the fallback
counters, the reserved pool, where the instances were placed, outputs against the CPU. The
onnxruntime proofs are in `gpu_ort_tensorrt.py`, the fork-server child's in `gpu_fork_child.py`.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.gpu_manager import fallbacks, infer, instances, same, with_manager
from benchmarks.gpu_row import Row, Skipped
from benchmarks.gpu_torch_model import cpu_reference, torch_linear_model
from benchmarks.gpu_warm_process import DEVICE


def torch_arena_rows(torch: Any, work: Path) -> list[Row]:
    """A TorchScript model restored into the GPU: every parameter a view of one device arena."""
    from snapshotter import ImageLoader, build_image
    from snapshotter.image_ref import resolve_target
    from snapshotter.stores.dir_store import DirStore

    repo, cache = work / "arena-models", work / "arena-cache"
    model = torch_linear_model(repo, "arena_mlp", width=1024)
    target = resolve_target("cuda")
    build_image(model / "1", DirStore(cache), target=target)
    x = np.random.default_rng(5).standard_normal((2, 1024)).astype(np.float32)
    want = cpu_reference(model, x)

    async def check(manager: Any, metrics: Any) -> list[Row]:
        got = await infer(manager, "arena_mlp", "INPUT__0", x)
        (backend,) = instances(manager, "arena_mlp")
        module = getattr(backend._module, "module", backend._module)  # under CUDA graphs
        params = [*module.parameters(), *module.buffers()]
        storages = {p.untyped_storage().data_ptr() for p in params}
        on_gpu = all(p.device.type == "cuda" for p in params)
        needed = sum(p.numel() * p.element_size() for p in params)
        arena = params[0].untyped_storage().nbytes() if params else 0
        inside = on_gpu and len(storages) == 1 and arena >= needed
        text = metrics.exposition().decode()
        restored = 'thaw_model_restored_from_snapshot{model="arena_mlp",version="1"} 1.0' in text
        falls = fallbacks(text, "arena_mlp")
        return [
            Row(
                "torch: parameters inside the restored device arena",
                f"{len(params)} tensors, {len(storages)} storage(s) on "
                f"{params[0].device if params else '-'}, arena {arena} B >= {needed} B",
                "one arena, restored by the snapshotter",
                "ok" if inside and restored else f"NOT IN THE ARENA (restored={restored})",
                ok=inside and restored,
            ),
            Row(
                "torch on the GPU: outputs == CPU, zero fallbacks",
                f"max |diff| {np.abs(got - want).max():.2e}, fallbacks {falls:g}",
                "torch on CPU",
                "ok" if same(got, want) and falls == 0 else "MISMATCH or fallback",
                ok=same(got, want) and falls == 0,
            ),
        ]

    loader = ImageLoader(None, cache, target)
    return asyncio.run(with_manager(repo, "arena_mlp", check, cache=cache, loader=loader))


def warmup_rows(torch: Any, work: Path) -> list[Row]:
    """What `thaw serve --cuda-memory-pool-byte-size 0:256MiB --pinned-memory-pool-byte-size
    128MiB` does before ready: pool reserved, staging pinned."""
    from runtime.config import ServeConfig
    from runtime.observe.metrics import Metrics
    from runtime.process.cuda_warmup import CudaWarmup

    pool = 256 << 20
    config = ServeConfig(
        repository=work, target="cuda", cuda_memory_pools=((0, pool),),
        pinned_memory_pool_bytes=128 << 20,
    )  # fmt: skip
    warmup = CudaWarmup(config, metrics=Metrics(), arena=None, gpus=(0,))
    start = time.perf_counter()
    warmup.run()
    seconds = time.perf_counter() - start
    reserved = torch.cuda.memory_reserved(0)
    staged = warmup.staging is not None and warmup.staging.allocated
    ok = warmup.ready and reserved >= pool and staged
    return [
        Row(
            "CUDA warm-up: pool reserved, pinned staging allocated",
            f"{seconds:.2f} s; reserved {reserved / 2**20:.0f} MiB, staging {staged}",
            "context already created in this process",
            "ok" if ok else "NOT READY",
            ok=ok,
        )
    ]


def graph_rows(work: Path) -> list[Row]:
    """A torch model with `optimization.cuda.graphs`: graphs captured, replay == eager."""
    graphs = "optimization { cuda { graphs: true graph_spec [ { batch_size: 4 } ] } }\n"
    model = torch_linear_model(work / "graph-models", "graphed", extra=graphs)
    x = np.random.default_rng(9).standard_normal((4, 256)).astype(np.float32)
    want = cpu_reference(model, x)

    async def check(manager: Any, metrics: Any) -> list[Row]:
        got = await infer(manager, "graphed", "INPUT__0", x)
        (backend,) = instances(manager, "graphed")
        captured = getattr(backend._module, "captured", 0)
        falls = fallbacks(metrics.exposition().decode(), "graphed")
        ok = captured >= 1 and falls == 0 and same(got, want)
        return [
            Row(
                "CUDA graphs: captured at load, replay == CPU, no capture fallback",
                f"{captured} graph(s), fallbacks {falls:g}, max |diff| "
                f"{np.abs(got - want).max():.2e}",
                "torch on CPU",
                "ok" if ok else "NOT CAPTURED or mismatch",
                ok=ok,
            )
        ]

    return asyncio.run(with_manager(work / "graph-models", "graphed", check))


def compile_rows(work: Path) -> list[Row]:
    """An exported program with TORCH_COMPILE_OPTIONAL_PARAMETERS, compiled on the GPU."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise Skipped("no C compiler (Triton's launcher stubs need one)", missing="a C compiler")
    params = json.dumps({"mode": "default"}).replace('"', '\\"')
    extra = (
        f'parameters {{ key: "TORCH_COMPILE_OPTIONAL_PARAMETERS" value: {{ string_value: '
        f'"{params}" }} }}\n'
    )
    model = torch_linear_model(work / "compile-models", "compiled", extra=extra, export=True)
    x = np.random.default_rng(10).standard_normal((2, 256)).astype(np.float32)
    want = cpu_reference(model, x)
    start = time.perf_counter()

    async def check(manager: Any, metrics: Any) -> list[Row]:
        loaded = time.perf_counter() - start
        got = await infer(manager, "compiled", "INPUT__0", x)
        falls = fallbacks(metrics.exposition().decode(), "compiled")
        ok = same(got, want) and falls == 0
        return [
            Row(
                "torch.compile (.pt2) on the GPU: == CPU, zero fallbacks",
                f"load + compile {loaded:.1f} s, max |diff| {np.abs(got - want).max():.2e}",
                f"compiler {compiler}",
                "ok" if ok else "MISMATCH or fallback",
                ok=ok,
            )
        ]

    return asyncio.run(with_manager(work / "compile-models", "compiled", check))


def kind_auto_rows(torch: Any, work: Path) -> list[Row]:
    """`--target auto`: a config without instance groups runs on every GPU found."""
    model = torch_linear_model(work / "auto-models", "auto_mlp", groups="")
    x = np.random.default_rng(11).standard_normal((1, 256)).astype(np.float32)
    want = cpu_reference(model, x)
    gpus = torch.cuda.device_count()

    async def check(manager: Any, metrics: Any) -> list[Row]:
        got = await infer(manager, "auto_mlp", "INPUT__0", x)
        groups = manager.config("auto_mlp", None)["instance_group"]
        devices = sorted({b._device for b in instances(manager, "auto_mlp")})
        placed = [(g["kind"], g["gpus"]) for g in groups] == [("KIND_GPU", list(range(gpus)))]
        ok = placed and devices == [f"cuda:{i}" for i in range(gpus)] and same(got, want)
        return [
            Row(
                "KIND_AUTO with --target auto: on every GPU, as Triton places it",
                f"{[(g['kind'], g['gpus']) for g in groups]}, instances on {devices}",
                f"{gpus} GPU(s) found without a CUDA context",
                "ok" if ok else "NOT ON THE GPUS",
                ok=ok,
            )
        ]

    return asyncio.run(with_manager(work / "auto-models", "auto_mlp", check, target="auto"))


def oom_rows(torch: Any, work: Path) -> list[Row]:
    """A restore that does not fit fails that load with 503; once room is made, it loads."""
    from benchmarks import gpu_models
    from runtime.errors import DeviceOutOfMemory
    from snapshotter import ImageLoader, build_image
    from snapshotter.image_ref import resolve_target
    from snapshotter.stores.dir_store import DirStore

    repo, cache = work / "oom-models", work / "oom-cache"
    model = gpu_models.torchscript_mlp(repo, "oom_mlp", 1.0, width=8192)
    target = resolve_target("cuda")
    if not (work / "oom_mlp.built").exists():
        build_image(model / "1", DirStore(cache), target=target)
        (work / "oom_mlp.built").touch()
    torch.cuda.empty_cache()
    free = torch.cuda.mem_get_info(0)[0]
    filler = torch.empty(max(0, free - (512 << 20)), dtype=torch.uint8, device=DEVICE)
    status: Any = None
    try:
        asyncio.run(_load_only(repo, "oom_mlp", cache, ImageLoader(None, cache, target)))
    except DeviceOutOfMemory as exc:
        status = exc.status
    finally:
        del filler
        torch.cuda.empty_cache()
    x = np.ones((1, 8192), np.float32)

    async def check(manager: Any, metrics: Any) -> list[Row]:
        got = await infer(manager, "oom_mlp", "INPUT__0", x)
        return [
            Row(
                "out of memory -> 503, then the next load works",
                f"first load: {status}; after freeing: output {got.shape}",
                "a 1 GiB image with ~512 MiB free",
                "ok" if status == 503 else f"NOT 503 ({status})",
                ok=status == 503,
            )
        ]

    loader = ImageLoader(None, cache, target)
    return asyncio.run(with_manager(repo, "oom_mlp", check, cache=cache, loader=loader))


async def _load_only(repo: Path, name: str, cache: Path, loader: Any) -> None:
    async def nothing(manager: Any, metrics: Any) -> list[Row]:
        return []

    await with_manager(repo, name, nothing, cache=cache, loader=loader)
