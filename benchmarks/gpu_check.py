"""The GPU path's device check: one command, one table, every number beside its same-run baseline.

    python benchmarks/gpu_check.py [--strict] [--quick] [--allow-missing PKG,...]
                                   [--sizes 1,4,16] [--model-gib 4] [--work .bench/gpu]
                                   [--budget-s 480] [--json FILE]

Every step of `PLAN` writes rows: measurements beside their baselines (pinned H2D, restore GB/s,
cold starts, first vs warm inference) and proofs that each GPU path really ran on the GPU
(parameters inside the restored device arena, the planned execution provider first in the
session's `get_providers()`, zero `thaw_device_fallbacks_total`, a fork-server child among
NVML's GPU processes, outputs against the CPU). The table ends with a summary: rows exercised,
skipped (and why), failed.

`--strict` (what a device session runs) exits non-zero unless every row ran and held: a row
skipped for the time budget or for a package or tool this machine lacks is a failure too (so
the check cannot pass by skipping), except what `--allow-missing` names (e.g.
`onnxruntime-gpu,tensorrt` on a machine known to have only CPU onnxruntime) and rows whose
hardware is not there. Without CUDA, `--strict` prints every row it would run on a GPU and
exits 1 with "no CUDA device" as its only reason; without `--strict` it prints one line and
exits 0. `--quick` runs the steps marked quick, with 1 GiB sizes (sized for about 3 minutes);
the full check is sized for one 10-minute device call on an H200 (`--budget-s` 480 skips steps
started later). Neither has been timed on a GPU yet.
Inputs are generated under `--work` and reused by later runs.
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

from benchmarks import gpu_models, gpu_proofs  # noqa: E402
from benchmarks.gpu_proofs import Row, Skipped, fallbacks  # noqa: E402

DEVICE = "cuda:0"
CPU_EP, CUDA_EP, TRT_EP = (
    "CPUExecutionProvider",
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
)


class Check:
    """Collects rows; runs each step unless the time budget is spent. A step's `Skipped`
    (or ImportError: a package is missing) becomes a skipped row, anything else a FAILED row."""

    def __init__(self, budget_s: float) -> None:
        self.rows: list[Row] = []
        self.started = time.perf_counter()
        self.budget_s = budget_s

    def step(self, name: str, fn: Callable[[], list[Row]]) -> None:
        elapsed = time.perf_counter() - self.started
        if elapsed > self.budget_s:
            reason = f"time budget ({elapsed:.0f} s of {self.budget_s:.0f})"
            self.rows.append(Row(name, f"skipped: {reason}", skipped=reason))
            return
        try:
            self.rows.extend(fn())
        except Skipped as exc:
            self.rows.append(Row(name, f"skipped: {exc}", skipped=str(exc), missing=exc.missing,
                                 hardware=exc.hardware))  # fmt: skip
        except ImportError as exc:
            missing = exc.name or str(exc)
            self.rows.append(Row(name, f"skipped: {missing} not installed",
                                 skipped=f"{missing} not installed", missing=missing))  # fmt: skip
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


def strict_reasons(rows: list[Row], allowed_missing: frozenset[str]) -> list[str]:
    """Why `--strict` fails: every failed row, and every skip this machine could have run
    (the time budget, a package not named in `allowed_missing`); hardware skips are allowed."""
    reasons = []
    for row in rows:
        if not row.ok:
            reasons.append(f"failed: {row.check}")
        elif (
            row.skipped is not None
            and not row.hardware
            and (row.missing is None or row.missing not in allowed_missing)
        ):
            reasons.append(f"skipped: {row.check} ({row.skipped})")
    return reasons


def summary(rows: list[Row]) -> str:
    """Rows exercised, skipped (with why) and failed."""
    ran = [r for r in rows if r.skipped is None and r.ok]
    skipped = [r for r in rows if r.skipped is not None]
    failed = [r for r in rows if not r.ok]
    lines = [f"exercised {len(ran)}, skipped {len(skipped)}, failed {len(failed)}"]
    lines += [f"  skipped: {r.check}: {r.skipped}" for r in skipped]
    lines += [f"  FAILED: {r.check}: {r.result}" for r in failed]
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


READ_THREADS = 8  # reader threads of every restore the check times


def ring_loader(cache: Path, target: str, pool: Any, **host_tier: Any) -> Any:
    """An ImageLoader whose restores into a GPU read with `READ_THREADS` threads into `pool`'s
    ring: a restore to a device takes its reader count from `DeviceConfig.read_threads`, not
    from the loader's `read_threads` (that one is for the store's reads)."""
    from snapshotter import DeviceConfig, ImageLoader

    return ImageLoader(
        None, cache, target, staging=pool, read_threads=READ_THREADS,
        device=DeviceConfig(read_threads=READ_THREADS), **host_tier,
    )  # fmt: skip


def _warm_page_cache(cache: Path) -> None:
    for path in (cache / "chunks").rglob("*"):
        if path.is_file():
            with path.open("rb") as f:
                while f.read(64 << 20):
                    pass


def _warm_images(cache: Path, refs: list[Any]) -> None:
    from snapshotter import ImageLoader
    from snapshotter.stores.dir_store import DirStore

    store = DirStore(cache)
    for ref in refs:
        for chunk in ImageLoader(None, cache, "cpu").manifest(ref).chunks:
            with store.chunk_file(chunk.digest).open("rb") as f:
                while f.read(64 << 20):
                    pass


def restore_rows(torch: Any, state: dict[str, Any], work: Path, sizes: list[float]) -> list[Row]:
    from snapshotter import ImageRef

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
        loader = ring_loader(cache, "cpu", pool)
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
    # Bytes, not values: random fp16 weights hold NaNs, and NaN != NaN.
    same = all(
        torch.equal(_raw(torch, image.torch_tensors()[n].cpu()), _raw(torch, host[n]))
        for n in names
    )
    return Row(
        "restored VRAM bytes == CPU restore",
        f"{len(names)} sampled tensors",
        "CPU restore",
        "ok" if same else "MISMATCH",
        ok=same,
    )


def _raw(torch: Any, tensor: Any) -> Any:
    """A tensor's bytes as a flat uint8 tensor."""
    return tensor.reshape(-1).view(torch.uint8)


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
            return Row(label, f"skipped: {no_room}", skipped=no_room, hardware=True)

        def loader() -> Any:
            return ring_loader(cache, "cpu", pool, host_cache_dir=tier, host_max_bytes=1 << 40)

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


def sharded_rows(
    torch: Any, work: Path, sizes: list[float], *, single_gib: float = 1.0
) -> list[Row]:
    """An LLM-shaped image (numbered shards, index, tokenizer files: `sharded_set`) restored
    into VRAM through the pinned ring, beside the 1 GiB single-file image in the same step:
    the largest size up to 8 GiB, 8 shards per GiB (a 7-8B model's 4-5 GB shards are bigger;
    more, smaller shards are the harder case for per-file costs)."""
    import threading

    from benchmarks.sharded_set import TOKENIZER_FILES, write_checkpoint
    from snapshotter import ImageRef, build_image
    from snapshotter.staging_ring import pread_piece
    from snapshotter.stores.dir_store import DirStore

    gib = min(8.0, max(sizes))
    shards = max(8, int(gib * 8))
    cache, name = work / "cache", f"llm{gib:g}g{shards}"
    single_name = f"w{single_gib:g}g"
    gpu_models.weights_image(cache, work, single_name, single_gib, target="cpu")
    version = work / "repo" / name / "1"
    if not (work / f"{name}.built").exists():
        write_checkpoint(version, gib, shards=shards)
        build_image(version, DirStore(cache), hash_threads=max(2, (os.cpu_count() or 2) // 2))
        for shard in version.glob("*.safetensors"):
            shard.unlink()  # the image holds them; the tokenizer files stay to compare
        (work / f"{name}.built").touch()
    single_ref, sharded_ref = ImageRef(single_name, "1", "cpu"), ImageRef(name, "1", "cpu")
    _warm_images(cache, [single_ref, sharded_ref])  # these two only, not every size's image
    pool = _warm_pool()
    read_bytes, lock = [0], threading.Lock()

    def counted(job: Any, offset: int, view: memoryview) -> None:
        pread_piece(job, offset, view)  # the ring's own reader, counted
        with lock:
            read_bytes[0] += len(view)

    def restore(ref: Any) -> tuple[float, Any]:
        read_bytes[0] = 0
        loader = ring_loader(cache, "cpu", pool, device_read=counted)
        seconds, image = _timed(torch, lambda: loader.restore(ref, device=DEVICE))
        return image.manifest.arena_bytes / seconds / 1e9, image

    single, image = restore(single_ref)
    del image  # the VRAM back before the big one
    gc.collect()
    sharded, image = restore(sharded_ref)
    ratio = sharded / single
    through_ring = read_bytes[0] == image.manifest.arena_bytes
    same = _bytes_match(torch, ring_loader(cache, "cpu", pool), cache, image.ref, image).ok
    files = image.files_dir is not None and all(
        (image.files_dir / f).read_bytes() == (version / f).read_bytes() for f in TOKENIZER_FILES
    )
    del image
    gc.collect()
    return [
        Row(
            f"restore {gib:g} GiB sharded checkpoint ({shards} shards + tokenizer) -> VRAM",
            f"{sharded:.1f} GB/s",
            f"{single_gib:g} GiB single-file image: {single:.1f} GB/s ({ratio:.0%})",
            "ok (within 10%)" if ratio >= 0.9 else "below goal (within 10%)",
        ),
        Row(
            "sharded restore: every byte through the pinned ring, == CPU, tokenizer on disk",
            f"ring read {read_bytes[0] / 2**30:.2f} GiB; bytes match: {same}; files: {files}",
            "CPU restore",
            "ok" if through_ring and same and files else "MISMATCH",
            ok=through_ring and same and files,
        ),
    ]


async def _manager_cold_start(
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
            # The restore publishes in the background; have it done before the timed load.
            await asyncio.to_thread(loader.keep_in_host_tier, ImageRef(name, "1", target))
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


def ort_rows(torch: Any, work: Path) -> list[Row]:
    import onnxruntime as ort

    providers = ort.get_available_providers()
    if CUDA_EP not in providers:
        why = f"onnxruntime {ort.__version__} has {', '.join(providers)}: not the GPU build"
        raise Skipped(why, missing="onnxruntime-gpu")
    repo = work / "models"
    model = gpu_models.onnx_mlp(repo, "ort_mlp")
    path = str(model / "1" / "model.onnx")
    x = np.random.default_rng(3).standard_normal((1, 2048)).astype(np.float32)
    want = ort.InferenceSession(path, providers=[CPU_EP]).run(None, {"INPUT0": x})[0]
    rows = _first_vs_warm(
        ort, "ORT-CUDA", path, [(CUDA_EP, {"device_id": "0"}), CPU_EP], x, want, 1e-3
    )
    if TRT_EP not in providers:
        why = "this onnxruntime has no TensorrtExecutionProvider"
        return [*rows, Row("TensorRT EP", f"skipped: {why}", skipped=why, missing="tensorrt")]
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
            f"restored={restored[0]}, fallbacks={restored[1]:g}",
            ok=restored[0] and restored[1] == 0,
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
        raise Skipped("tensorrt not installed", missing="tensorrt") from None
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
    from runtime.observe.metrics import Metrics

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


@dataclass(frozen=True)
class Step:
    """One step of the check: its name, the rows it writes (as the plan lists them), whether
    `--quick` runs it, and how it runs (`Context` in, rows out)."""

    name: str
    proves: tuple[str, ...]
    run: Callable[[Context], list[Row]]
    quick: bool = True


@dataclass
class Context:
    """What every step gets: torch, the work folder, sizes, and numbers steps share."""

    torch: Any
    work: Path
    sizes: list[float]
    model_gib: float
    quick: bool
    state: dict[str, Any]


PLAN = (
    Step(
        "environment",
        ("onnxruntime wheel (CPU or GPU build, never both), torch, CUDA, cuDNN, TensorRT, driver",),
        lambda c: gpu_proofs.environment_rows(c.torch),
    ),
    Step(
        "pinned H2D",
        ("pinned H2D, 1 GiB (best of 5)", "pageable H2D, 1 GiB (best of 2)"),
        lambda c: h2d_rows(c.torch, c.state),
    ),
    Step(
        "restore to VRAM",
        (
            "restore <N> GiB image -> VRAM, each size, vs pinned H2D",
            "restored VRAM bytes == CPU restore",
            "restore from the host tier, through the ring",
        ),
        lambda c: restore_rows(c.torch, c.state, c.work, c.sizes),
    ),
    Step(
        "sharded checkpoint to VRAM",
        (
            "restore <N> GiB sharded checkpoint (<K> shards + tokenizer) -> VRAM vs 1 GiB file",
            "sharded restore: every byte through the pinned ring, == CPU, tokenizer on disk",
        ),
        lambda c: sharded_rows(c.torch, c.work, c.sizes),
    ),
    Step(
        "torch in the device arena",
        (
            "torch: parameters inside the restored device arena",
            "torch on the GPU: outputs == CPU, zero fallbacks",
        ),
        lambda c: gpu_proofs.torch_arena_rows(c.torch, c.work),
    ),
    Step(
        "onnxruntime CUDA EP",
        ("onnxruntime: planned EP first in get_providers(), zero fallbacks, == CPU",),
        lambda c: gpu_proofs.ort_ep_rows(c.work),
    ),
    Step(
        "onnxruntime device initializers",
        (
            "onnxruntime add_initializer, device OrtValues: VRAM the session adds",
            "onnxruntime add_external_initializers, host OrtValues: VRAM the session adds",
        ),
        lambda c: gpu_proofs.ort_device_initializer_rows(c.torch, c.work),
    ),
    Step(
        "CUDA warm-up",
        ("CUDA warm-up: pool reserved, pinned staging allocated",),
        lambda c: gpu_proofs.warmup_rows(c.torch, c.work),
    ),
    Step(
        "CUDA graphs",
        ("CUDA graphs: captured at load, replay == CPU, no capture fallback",),
        lambda c: gpu_proofs.graph_rows(c.work),
    ),
    Step(
        "KIND_AUTO",
        ("KIND_AUTO with --target auto: on every GPU, as Triton places it",),
        lambda c: gpu_proofs.kind_auto_rows(c.torch, c.work),
    ),
    Step(
        "out of memory",
        ("out of memory -> 503, then the next load works",),
        lambda c: gpu_proofs.oom_rows(c.torch, c.work),
    ),
    Step(
        "fork-server child",
        ("fork-server child on the GPU (thaw up --target auto, KIND_AUTO model)",),
        lambda c: gpu_proofs.fork_child_rows(ROOT, c.work),
    ),
    Step(
        "GPU metrics",
        ("Triton GPU metrics (NVML) for every visible GPU",),
        lambda c: metrics_rows(),
    ),
    Step(
        "cold start",
        (
            "cold start <N> GiB TorchScript, classic / thaw from the page cache / "
            "from the host tier",
            "outputs on the GPU == CPU",
        ),
        lambda c: cold_start_rows(c.torch, c.work, c.model_gib),
        quick=False,
    ),
    Step(
        "onnxruntime CUDA / TensorRT EP",
        (
            "ORT-CUDA: session + 1st inference vs warm",
            "TensorRT EP, no engine cache (builder runs)",
            "TensorRT EP, engines from the image",
        ),
        lambda c: ort_rows(c.torch, c.work),
        quick=False,
    ),
    Step(
        "TensorRT EP-context moved",
        ("TensorRT EP-context model, folder moved: loads and runs",),
        lambda c: gpu_proofs.trt_moved_context_rows(c.work),
        quick=False,
    ),
    Step(
        "tensorrt_plan",
        ("tensorrt_plan, engine from the image: load + 1st inference, == CPU",),
        lambda c: plan_rows(c.torch, c.work),
        quick=False,
    ),
    Step(
        "torch.compile",
        ("torch.compile (.pt2) on the GPU: == CPU, zero fallbacks",),
        lambda c: gpu_proofs.compile_rows(c.work),
        quick=False,
    ),
)


def plan_listing(steps: tuple[Step, ...], *, quick: bool) -> str:
    """Every row the check would run on a GPU, step by step."""
    lines = [f"rows gpu_check{' --quick' if quick else ''} runs on a GPU:"]
    for step in steps:
        if quick and not step.quick:
            continue
        lines.append(f"- {step.name}{'' if step.quick else ' (full check only)'}")
        lines += [f"    - {row}" for row in step.proves]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--strict", action="store_true", help="fail unless every row ran and held")
    parser.add_argument("--quick", action="store_true", help="the quick steps, 1 GiB sizes")
    parser.add_argument(
        "--allow-missing",
        default="",
        metavar="PKG,...",
        help="packages whose absence --strict accepts (e.g. onnxruntime-gpu)",
    )
    parser.add_argument("--sizes", default=None, help="restore sizes in GiB (default 1,4,16)")
    parser.add_argument("--model-gib", type=float, default=None, help="cold-start model (4-16)")
    parser.add_argument("--work", type=Path, default=ROOT / ".bench" / "gpu")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="skip steps started after this (default 480, --quick 200)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    from snapshotter import cuda_available

    ok, why = cuda_available()
    if not ok:
        if not args.strict:
            print(f"gpu_check: no CUDA device ({why}): nothing to check")
            return 0
        print(plan_listing(PLAN, quick=args.quick))
        print(f"\ngpu_check --strict: FAILED, 1 reason:\n  no CUDA device ({why})")
        return 1
    import torch

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    sizes_text = args.sizes or ("1" if args.quick else "1,4,16")
    context = Context(
        torch=torch,
        work=work,
        sizes=[float(s) for s in sizes_text.split(",") if s.strip()],
        model_gib=args.model_gib or (1.0 if args.quick else 4.0),
        quick=args.quick,
        state={},
    )
    budget = args.budget_s if args.budget_s is not None else (200.0 if args.quick else 480.0)
    check = Check(budget)
    for step in PLAN:
        if args.quick and not step.quick:
            continue
        check.step(step.name, functools.partial(step.run, context))
    header = (
        f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
        f"{os.cpu_count()} CPUs; page cache warm; one process, CUDA context ready"
        f"{'; --quick' if args.quick else ''}"
    )
    print(check.table(header))
    print("\n" + summary(check.rows))
    if args.quick:
        left = [step.name for step in PLAN if not step.quick]
        print(f"--quick: {len(left)} step(s) left for the full check: {', '.join(left)}")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in check.rows], indent=1))
    if args.strict:
        allowed = frozenset(p.strip() for p in args.allow_missing.split(",") if p.strip())
        reasons = strict_reasons(check.rows, allowed)
        if reasons:
            print(f"\ngpu_check --strict: FAILED, {len(reasons)} reason(s):")
            print("\n".join(f"  {r}" for r in reasons))
            return 1
        print("\ngpu_check --strict: every row ran and held")
    return 0 if all(r.ok for r in check.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
