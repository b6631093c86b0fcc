"""The GPU path's device check: one command, one table, every number beside its same-run baseline.

    python benchmarks/gpu_check.py [--sizes 1,4,16] [--model-gib 4] [--work .bench/gpu]
                                   [--budget-s 270] [--json FILE]

On a machine without CUDA it prints one line, `gpu_check: no CUDA device (...)`, and exits 0.
With a GPU, in one process (a CUDA-ready warm process, as `thaw serve --cuda-memory-pool-byte-size`
makes one), it measures and prints one Markdown table:

  baseline     pinned host-to-device copy of 1 GiB (best of 5); pageable for reference
  restore      `ImageLoader.restore(ref, device="cuda:0")` of 1, 4, 16 GB images, page cache
               warm, through a pre-pinned staging ring: GB/s and % of pinned H2D (goal >= 80%);
               the largest again from the host tier (a tmpfs file under /dev/shm, mapped,
               copied through the same ring; goal 16 GB < 0.5 s)
  correctness  restored device bytes == a CPU restore's (sampled); model outputs on the GPU
               == CPU outputs (torch, onnxruntime CUDA, TensorRT), within float tolerance
  cold start   a `--model-gib` TorchScript model through `ModelManager.load` + first inference:
               from the page cache and from the host tier, vs `torch.jit.load(map_location=cuda)`
  engines      ORT-CUDA first inference vs warm; TensorRT EP first inference without a cache
               (the builder runs) vs with the image's engines (goal <= 2x warm); a
               `tensorrt_plan` from its image. Rows say "skipped: ..." where onnxruntime-gpu or
               TensorRT is not installed.
  metrics      Triton's `nv_gpu_*` families through NVML

Rows past `--budget-s` are skipped (the check must end well inside 5 minutes); a row that
raises says FAILED with the error, and the exit status is 1 if any row failed or any
correctness check did not hold. Inputs are generated under `--work` and reused by later runs.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks import gpu_models  # noqa: E402

DEVICE = "cuda:0"
CPU_EP, CUDA_EP, TRT_EP = (
    "CPUExecutionProvider",
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
)


@dataclass
class Row:
    """One line of the table; `ok` False fails the check (a mismatch or an error)."""

    check: str
    result: str
    baseline: str = ""
    verdict: str = ""
    ok: bool = True


class Check:
    """Collects rows; runs each step unless the time budget is spent."""

    def __init__(self, budget_s: float) -> None:
        self.rows: list[Row] = []
        self.started = time.perf_counter()
        self.budget_s = budget_s

    def step(self, name: str, fn: Callable[[], list[Row]]) -> None:
        elapsed = time.perf_counter() - self.started
        if elapsed > self.budget_s:
            self.rows.append(
                Row(name, f"skipped: time budget ({elapsed:.0f} s of {self.budget_s:.0f})")
            )
            return
        try:
            self.rows.extend(fn())
        except ImportError as exc:
            self.rows.append(Row(name, f"skipped: {exc.name or exc} not installed"))
        except Exception as exc:  # a check script reports every failure as a row and goes on
            self.rows.append(Row(name, f"FAILED: {exc!r}"[:300], ok=False))
        print(f"  {name}: done at {time.perf_counter() - self.started:.0f} s", file=sys.stderr)

    def table(self, header: str) -> str:
        lines = [
            header,
            "",
            "| check | result | baseline (same run) | verdict |",
            "|---|---|---|---|",
        ]
        lines += [f"| {r.check} | {r.result} | {r.baseline} | {r.verdict} |" for r in self.rows]
        lines.append(f"\ntotal {time.perf_counter() - self.started:.0f} s")
        return "\n".join(lines)


def _timed(torch: Any, fn: Callable[[], Any]) -> tuple[float, Any]:
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start, out


def h2d_rows(torch: Any, state: dict[str, Any]) -> list[Row]:
    n = 1 << 30
    dev = torch.empty(n, dtype=torch.uint8, device=DEVICE)
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    pageable = torch.empty(n, dtype=torch.uint8)
    best = min(_timed(torch, lambda: dev.copy_(pinned, non_blocking=True))[0] for _ in range(5))
    slow = min(_timed(torch, lambda: dev.copy_(pageable))[0] for _ in range(2))
    state["h2d"] = n / best / 1e9
    return [
        Row("pinned H2D, 1 GiB (best of 5)", f"{state['h2d']:.1f} GB/s", "the ceiling"),
        Row("pageable H2D, 1 GiB (best of 2)", f"{n / slow / 1e9:.1f} GB/s", "for reference"),
    ]


@functools.cache
def _warm_pool() -> Any:
    """The pinned staging ring a `--pinned-memory-pool-byte-size 402653184` process holds."""
    from snapshotter import StagingPool
    from snapshotter.cuda_copier import TorchCudaCopier

    pool = StagingPool(slot_bytes=64 << 20, slots=6)
    pool.allocate(TorchCudaCopier(DEVICE))
    return pool


def _warm_page_cache(cache: Path) -> None:
    for path in (cache / "chunks").rglob("*"):
        if path.is_file():
            with path.open("rb") as f:
                while f.read(64 << 20):
                    pass


def restore_rows(torch: Any, state: dict[str, Any], work: Path, sizes: list[float]) -> list[Row]:
    from snapshotter import ImageLoader, ImageRef

    cache = work / "cache"
    for gib in sizes:
        gpu_models.weights_image(cache, work, f"w{gib:g}g", gib, target="cpu")
    _warm_page_cache(cache)
    # What a CUDA-ready warm process holds: a pre-pinned ring and a reserved device pool.
    pool = _warm_pool()
    reserve = torch.empty(
        int(max(sizes) * (1 << 30)) + (64 << 20), dtype=torch.uint8, device=DEVICE
    )
    del reserve
    rows = []
    for gib in sizes:
        ref = ImageRef(f"w{gib:g}g", "1", "cpu")
        loader = ImageLoader(None, cache, "cpu", staging=pool, read_threads=8)
        seconds, image = _timed(torch, lambda: loader.restore(ref, device=DEVICE))  # noqa: B023
        gbps = image.manifest.arena_bytes / seconds / 1e9
        share = gbps / state["h2d"]
        rows.append(
            Row(
                f"restore {gib:g} GiB image -> VRAM (page cache warm)",
                f"{gbps:.1f} GB/s ({seconds:.2f} s)",
                f"{share:.0%} of pinned H2D",
                "ok (>= 80%)" if share >= 0.8 else "below goal (80%)",
            )
        )
        if gib == sizes[0]:
            rows.append(_bytes_match(torch, loader, cache, ref, image))
        del image
        gc.collect()
    rows.append(_host_tier_row(torch, cache, sizes[-1], pool, state))
    return rows


def _bytes_match(torch: Any, loader: Any, cache: Path, ref: Any, image: Any) -> Row:
    from snapshotter import ImageLoader

    host = ImageLoader(None, cache, "cpu").restore(ref).torch_tensors()
    names = sorted(host)[:: max(1, len(host) // 8)]
    same = all(torch.equal(image.torch_tensors()[n].cpu(), host[n]) for n in names)
    return Row(
        "restored VRAM bytes == CPU restore",
        f"{len(names)} sampled tensors",
        "CPU restore",
        "ok" if same else "MISMATCH",
        ok=same,
    )


def _host_tier_dir(nbytes: int) -> tuple[Path, str | None]:
    """A fresh host-tier directory on /dev/shm (a tmpfs, as `thaw up` uses), and why it cannot
    hold `nbytes` (None when it can)."""
    tier = Path("/dev/shm") / f"thaw-gpu-check-{os.getpid()}"
    tier.mkdir(mode=0o700, exist_ok=True)
    free = shutil.disk_usage(tier).free
    if free < nbytes + (64 << 20):
        return (
            tier,
            f"/dev/shm has {free / 2**30:.1f} GiB free, the image needs {nbytes / 2**30:.1f}",
        )
    return tier, None


def _host_tier_row(torch: Any, cache: Path, gib: float, pool: Any, state: dict[str, Any]) -> Row:
    from snapshotter import ImageLoader, ImageRef

    ref = ImageRef(f"w{gib:g}g", "1", "cpu")
    label = f"restore {gib:g} GiB from the host tier (mapped, through the pinned ring)"
    nbytes = ImageLoader(None, cache, "cpu").manifest(ref).arena_bytes
    tier, no_room = _host_tier_dir(nbytes)
    try:
        if no_room is not None:
            return Row(label, f"skipped: {no_room}")

        def loader() -> Any:
            return ImageLoader(
                None, cache, "cpu", staging=pool, read_threads=8, host_cache_dir=tier,
                host_max_bytes=1 << 40,
            )  # fmt: skip

        if not loader().keep_in_host_tier(ref):  # what a restore publishes in the background
            return Row(label, "FAILED: the host tier did not keep the image", ok=False)
        fresh = loader()  # another process's loader: it maps the kept file
        seconds, image = _timed(torch, lambda: fresh.restore(ref, device=DEVICE))
    finally:
        shutil.rmtree(tier, ignore_errors=True)
    gbps = image.manifest.arena_bytes / seconds / 1e9
    goal = 0.5 * gib / 16 if gib < 16 else 0.5
    verdict = "ok" if seconds <= goal and image.source == "host" else f"above goal ({goal:.2f} s)"
    return Row(
        label,
        f"{seconds:.3f} s ({gbps:.1f} GB/s, from={image.source})",
        f"{gbps / state['h2d']:.0%} of pinned H2D",
        verdict,
        ok=image.source == "host",
    )


async def _manager_cold_start(
    repo: Path,
    name: str,
    x: np.ndarray,
    *,
    host_tier: bool,
    cache: Path,
    input_name: str,
    pool: Any,
) -> tuple[float, float, np.ndarray, str]:
    """(load s, first inference s, output, restored?) through a ModelManager on cuda, with
    `pool` as a CUDA-ready warm process's pinned staging (`--pinned-memory-pool-byte-size`)."""
    from runtime.config import ModelControlMode, ServeConfig
    from runtime.inference import InferRequest, InferTensor
    from runtime.metrics import Metrics
    from runtime.model_manager import ModelManager
    from snapshotter import ImageLoader, ImageRef
    from snapshotter.image_ref import resolve_target

    config = ServeConfig(
        repository=repo, model_control_mode=ModelControlMode.EXPLICIT, cache=cache, target="cuda"
    )
    target = resolve_target("cuda")
    tier = Path("/dev/shm") / f"thaw-gpu-check-{os.getpid()}" if host_tier else None
    loader = ImageLoader(
        None, cache, target, staging=pool, read_threads=8, host_cache_dir=tier,
        host_max_bytes=1 << 40 if host_tier else 0,
    )  # fmt: skip
    metrics = Metrics()
    manager = ModelManager(config, metrics=metrics, image_loader=loader)
    await manager.start()
    try:
        if host_tier:  # fill the host tier, then scale to zero
            await manager.load(name)
            await manager.unload(name)
            # The restore publishes in the background; have it done before the timed load.
            await asyncio.to_thread(loader.keep_in_host_tier, ImageRef(name, "1", target))
            gc.collect()
        request = InferRequest(name, "", [InferTensor(input_name, "FP32", x.shape, x)])
        t0 = time.perf_counter()
        await manager.load(name)
        t1 = time.perf_counter()
        response = await manager.infer(request)
        t2 = time.perf_counter()
        restored = f'thaw_model_restored_from_snapshot{{model="{name}",version="1"}} 1.0'
        return (
            t1 - t0,
            t2 - t1,
            response.outputs[0].data,
            str(restored in metrics.exposition().decode()),
        )
    finally:
        await manager.stop()
        if tier is not None:
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
    _warm_page_cache(cache)
    x = np.random.default_rng(2).standard_normal((1, 8192)).astype(np.float32)
    cpu = torch.jit.load(str(model / "1" / "model.pt"), map_location="cpu")
    with torch.inference_mode():
        want = cpu(torch.from_numpy(x)).numpy()
    del cpu
    classic, _ = _timed(torch, lambda: _classic(torch, model / "1" / "model.pt", x))
    rows = [
        Row(
            f"cold start {gib:g} GiB TorchScript, classic",
            f"{classic:.2f} s",
            "torch.jit.load(map_location=cuda) + 1st inference",
        )
    ]
    for host_tier in (False, True):
        load_s, first_s, got, restored = asyncio.run(
            _manager_cold_start(
                repo,
                "mlp",
                x,
                host_tier=host_tier,
                cache=cache,
                input_name="INPUT__0",
                pool=_warm_pool(),
            )
        )
        where = "host tier" if host_tier else "page cache"
        rows.append(
            Row(
                f"cold start {gib:g} GiB TorchScript, thaw from the {where}",
                f"{load_s + first_s:.2f} s (load {load_s:.2f} + 1st {first_s:.3f})",
                f"{classic / (load_s + first_s):.1f}x faster than classic",
                f"restored={restored}",
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


def ort_rows(torch: Any, work: Path) -> list[Row]:
    import onnxruntime as ort

    providers = ort.get_available_providers()
    if CUDA_EP not in providers:
        return [
            Row(
                "onnxruntime CUDA / TensorRT EP",
                "skipped: onnxruntime-gpu not installed "
                f"(onnxruntime {ort.__version__} has {', '.join(providers)})",
            )
        ]
    repo = work / "models"
    model = gpu_models.onnx_mlp(repo, "ort_mlp")
    path = str(model / "1" / "model.onnx")
    x = np.random.default_rng(3).standard_normal((1, 2048)).astype(np.float32)
    want = ort.InferenceSession(path, providers=[CPU_EP]).run(None, {"INPUT0": x})[0]
    rows = _first_vs_warm(
        ort, "ORT-CUDA", path, [(CUDA_EP, {"device_id": "0"}), CPU_EP], x, want, 1e-3
    )
    if TRT_EP not in providers:
        return [
            *rows,
            Row("TensorRT EP", "skipped: this onnxruntime has no TensorrtExecutionProvider"),
        ]
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gpu-check-trt-") as tmp:
        options = {
            "device_id": "0",
            "trt_engine_cache_enable": "True",
            "trt_engine_cache_path": tmp,
            "trt_profile_min_shapes": "INPUT0:1x2048",
            "trt_profile_opt_shapes": "INPUT0:1x2048",
            "trt_profile_max_shapes": "INPUT0:8x2048",
        }
        trt = [(TRT_EP, options), (CUDA_EP, {"device_id": "0"}), CPU_EP]
        rows += _first_vs_warm(
            ort, "TensorRT EP, no engine cache (builder runs)", path, trt, x, want, 1e-2
        )
    rows += _trt_from_image(torch, work, x, want)
    return rows


def _first_vs_warm(
    ort: Any,
    label: str,
    path: str,
    providers: list[Any],
    x: np.ndarray,
    want: np.ndarray,
    tol: float,
) -> list[Row]:
    start = time.perf_counter()
    session = ort.InferenceSession(path, providers=providers)
    created = time.perf_counter()
    got = session.run(None, {"INPUT0": x})[0]
    first = time.perf_counter() - created
    warm = _warm(lambda: session.run(None, {"INPUT0": x}))
    same = bool(np.allclose(got, want, rtol=tol, atol=tol))
    return [
        Row(
            f"{label}: session + 1st inference",
            f"{created - start:.2f} s + {first * 1e3:.1f} ms",
            f"warm inference {warm * 1e3:.2f} ms",
            f"1st = {first / warm:.1f}x warm",
        ),
        Row(
            f"{label} outputs == CPU",
            f"max |diff| {np.abs(got - want).max():.2e}",
            "CPU EP",
            "ok" if same else "MISMATCH",
            ok=same,
        ),
    ]


def _warm(fn: Callable[[], Any], runs: int = 20) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _trt_from_image(torch: Any, work: Path, x: np.ndarray, want: np.ndarray) -> list[Row]:
    """The TensorRT EP through Thaw: engines (EP-context model) built into the image at build
    time, then a cold load from the image and its first inference."""
    from snapshotter import build_image
    from snapshotter.image_ref import resolve_target
    from snapshotter.stores.dir_store import DirStore

    repo, cache = work / "trt-models", work / "trt-cache"
    model = gpu_models.onnx_mlp(repo, "trt_mlp", tensorrt=True)
    if not (work / "trt_mlp.built").exists():
        build_image(model / "1", DirStore(cache), target=resolve_target("cuda"))
        (work / "trt_mlp.built").touch()
    return _image_model_rows(
        "TensorRT EP, engines from the image", repo, cache, "trt_mlp", x, want, 1e-2
    )


def _image_model_rows(
    label: str, repo: Path, cache: Path, name: str, x: np.ndarray, want: np.ndarray, tol: float
) -> list[Row]:
    load_s, first_s, got, restored = asyncio.run(
        _manager_cold_start(
            repo, name, x, host_tier=False, cache=cache, input_name="INPUT0", pool=_warm_pool()
        )
    )
    same = bool(np.allclose(got, want, rtol=tol, atol=tol))
    return [
        Row(
            f"{label}: load + 1st inference",
            f"{load_s:.2f} s + {first_s * 1e3:.1f} ms",
            "the builder never runs",
            f"restored={restored}",
        ),
        Row(
            f"{label} outputs == CPU",
            f"max |diff| {np.abs(got - want).max():.2e}",
            "CPU EP",
            "ok" if same else "MISMATCH",
            ok=same,
        ),
    ]


def plan_rows(torch: Any, work: Path) -> list[Row]:
    import onnxruntime as ort

    from snapshotter import build_image
    from snapshotter.image_ref import resolve_target
    from snapshotter.stores.dir_store import DirStore

    try:
        import tensorrt  # noqa: F401
    except ImportError:
        return [Row("tensorrt_plan from its image", "skipped: tensorrt not installed")]
    repo, cache = work / "plan-models", work / "plan-cache"
    onnx_dir = gpu_models.onnx_mlp(work / "models", "ort_mlp")
    model = gpu_models.tensorrt_plan(onnx_dir / "1" / "model.onnx", repo, "plan_mlp")
    if not (work / "plan_mlp.built").exists():
        build_image(model / "1", DirStore(cache), target=resolve_target("cuda"))
        (work / "plan_mlp.built").touch()
    x = np.random.default_rng(3).standard_normal((1, 2048)).astype(np.float32)
    want = ort.InferenceSession(str(onnx_dir / "1" / "model.onnx"), providers=[CPU_EP]).run(
        None, {"INPUT0": x}
    )[0]
    return _image_model_rows(
        "tensorrt_plan, engine from the image", repo, cache, "plan_mlp", x, want, 1e-2
    )


def metrics_rows() -> list[Row]:
    from runtime.metrics import Metrics

    text = Metrics().exposition().decode()
    gpus = sum(1 for line in text.splitlines() if line.startswith("nv_gpu_memory_total_bytes{"))
    return [
        Row(
            "Triton GPU metrics (NVML)",
            f"nv_gpu_* for {gpus} GPU(s)",
            "nvidia-smi",
            "ok" if gpus else "absent (is nvidia-ml-py installed?)",
            ok=gpus > 0,
        )
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="1,4,16", help="restore image sizes in GiB (default 1,4,16)"
    )
    parser.add_argument("--model-gib", type=float, default=4.0, help="cold-start model size (4-16)")
    parser.add_argument("--work", type=Path, default=ROOT / ".bench" / "gpu")
    parser.add_argument(
        "--budget-s", type=float, default=270.0, help="skip steps started after this"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    from snapshotter import cuda_available

    ok, why = cuda_available()
    if not ok:
        print(f"gpu_check: no CUDA device ({why}): nothing to check")
        return 0
    import torch

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    sizes = [float(s) for s in args.sizes.split(",") if s.strip()]
    check, state = Check(args.budget_s), {}
    check.step("pinned H2D", lambda: h2d_rows(torch, state))
    check.step("restore to VRAM", lambda: restore_rows(torch, state, work, sizes))
    check.step("cold start", lambda: cold_start_rows(torch, work, args.model_gib))
    check.step("onnxruntime CUDA / TensorRT EP", lambda: ort_rows(torch, work))
    check.step("tensorrt_plan", lambda: plan_rows(torch, work))
    check.step("GPU metrics", metrics_rows)
    header = (
        f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
        f"{os.cpu_count()} CPUs; page cache warm; one process, CUDA context ready"
    )
    print(check.table(header))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in check.rows], indent=1))
    return 0 if all(r.ok for r in check.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
