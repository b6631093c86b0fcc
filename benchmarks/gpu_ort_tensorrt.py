"""onnxruntime's CUDA and TensorRT execution providers (and tensorrt_plan) on the GPU: first
inference beside warm, engines from the image, the EP a session runs on, device initializers."""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import gpu_models
from benchmarks.gpu_cold_start import manager_cold_start
from benchmarks.gpu_manager import fallbacks, infer, instances, same, with_manager
from benchmarks.gpu_row import Row, Skipped
from benchmarks.gpu_warm_process import warm_pool

CPU_EP, CUDA_EP, TRT_EP = (
    "CPUExecutionProvider",
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
)


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
        _matches_cpu(label, got, want, same),
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
        manager_cold_start(
            repo, name, x, host_tier=False, cache=cache, input_name="INPUT0", pool=warm_pool()
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
        _matches_cpu(label, got, want, same),
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


def _need_ort_cuda() -> Any:
    try:
        import onnxruntime as ort
    except ImportError:
        raise Skipped("onnxruntime not installed", missing="onnxruntime-gpu") from None
    if CUDA_EP not in ort.get_available_providers():
        raise Skipped(
            f"onnxruntime {ort.__version__} has no {CUDA_EP} (the CPU build)",
            missing="onnxruntime-gpu",
        )
    return ort


def ort_ep_rows(work: Path) -> list[Row]:
    """An onnxruntime KIND_GPU model from its image: the CUDA EP first, no fallback."""
    ort = _need_ort_cuda()
    from snapshotter import ImageLoader, build_image
    from snapshotter.image_ref import resolve_target
    from snapshotter.stores.dir_store import DirStore

    repo, cache = work / "ort-ep-models", work / "ort-ep-cache"
    model = gpu_models.onnx_mlp(repo, "ort_ep", layers=4, width=1024)
    target = resolve_target("cuda")
    build_image(model / "1", DirStore(cache), target=target)
    x = np.random.default_rng(6).standard_normal((2, 1024)).astype(np.float32)
    path = str(model / "1" / "model.onnx")
    want = ort.InferenceSession(path, providers=[CPU_EP]).run(None, {"INPUT0": x})[0]

    async def check(manager: Any, metrics: Any) -> list[Row]:
        got = await infer(manager, "ort_ep", "INPUT0", x)
        (backend,) = instances(manager, "ort_ep")
        falls = fallbacks(metrics.exposition().decode(), "ort_ep")
        first = backend.providers[0] if backend.providers else "none"
        ok = first == CUDA_EP and falls == 0 and same(got, want)
        return [
            Row(
                "onnxruntime: planned EP first in get_providers(), zero fallbacks, == CPU",
                f"{backend.providers}, fallbacks {falls:g}, max |diff| "
                f"{np.abs(got - want).max():.2e}",
                "CPU EP",
                "ok" if ok else "NOT ON THE CUDA EP or mismatch",
                ok=ok,
            )
        ]

    loader = ImageLoader(None, cache, target)
    return asyncio.run(with_manager(repo, "ort_ep", check, cache=cache, loader=loader))


def ort_device_initializer_rows(torch: Any, work: Path) -> list[Row]:
    """The candidate zero-copy path: `SessionOptions.add_initializer` with device OrtValues;
    VRAM measured before and after the session, against host `add_external_initializers`."""
    ort = _need_ort_cuda()
    import onnx
    from onnx import numpy_helper

    # 512 MiB of weights: far above what the CUDA EP's own workspaces take, so "held" tells.
    model = gpu_models.onnx_mlp(work / "models", "ort_init", layers=8, width=4096)
    proto = onnx.load(str(model / "1" / "model.onnx"))
    weights = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    nbytes = sum(a.nbytes for a in weights.values())
    x = np.random.default_rng(7).standard_normal((1, 4096)).astype(np.float32)
    graph = proto.SerializeToString()
    want = ort.InferenceSession(graph, providers=[CPU_EP]).run(None, {"INPUT0": x})[0]
    cuda = [(CUDA_EP, {"device_id": "0"}), CPU_EP]
    rows = []
    for label, on_device in (("add_initializer, device OrtValues", True),
                             ("add_external_initializers, host OrtValues", False)):  # fmt: skip
        torch.cuda.synchronize()
        values = {
            n: ort.OrtValue.ortvalue_from_numpy(a, "cuda" if on_device else "cpu", 0)
            for n, a in weights.items()
        }
        before = torch.cuda.mem_get_info(0)[0]
        options = ort.SessionOptions()
        if on_device:
            for name, value in values.items():
                options.add_initializer(name, value)
        else:
            options.add_external_initializers(list(values), list(values.values()))
        try:
            session = ort.InferenceSession(graph, options, providers=cuda)
        except Exception as exc:  # onnxruntime's Fail/InvalidArgument: the path is refused
            rows.append(
                Row(
                    f"onnxruntime {label}: VRAM the session adds",
                    f"refused by onnxruntime: {exc}"[:200],
                    "",
                    "not usable here",
                )
            )
            continue
        got = session.run(None, {"INPUT0": x})[0]
        after = torch.cuda.mem_get_info(0)[0]
        held = before - after  # VRAM the session took beyond the OrtValues already there
        in_place = held < nbytes // 2
        rows.append(
            Row(
                f"onnxruntime {label}: VRAM the session adds",
                f"{held / 2**20:.0f} MiB for {nbytes / 2**20:.0f} MiB of weights",
                "VRAM before the session (torch.cuda.mem_get_info)",
                ("in place: zero-copy holds" if in_place else "copied: weights held twice")
                + ("" if same(got, want) else "; OUTPUTS MISMATCH"),
                ok=same(got, want),
            )
        )
        del session, values
    return rows


def trt_moved_context_rows(work: Path) -> list[Row]:
    """The image's TensorRT EP-context model, its folder moved, loaded and run."""
    ort = _need_ort_cuda()
    if TRT_EP not in ort.get_available_providers():
        raise Skipped("this onnxruntime has no TensorrtExecutionProvider", missing="tensorrt")
    from snapshotter import ImageLoader, ImageRef, build_image
    from snapshotter.image_ref import resolve_target
    from snapshotter.stores.dir_store import DirStore
    from snapshotter.trt_cache import ARTIFACT, CONTEXT_MODEL, with_caches
    from tritonconfig import parse_config, tensorrt_parameters
    from tritonconfig.tensorrt_accelerator import tensorrt_provider_options

    repo, cache = work / "trt-ctx-models", work / "trt-ctx-cache"
    model = gpu_models.onnx_mlp(repo, "trt_ctx", layers=4, width=1024, tensorrt=True)
    target = resolve_target("cuda")
    build_image(model / "1", DirStore(cache), target=target)
    image = ImageLoader(None, cache, target).restore(ImageRef("trt_ctx", "1", target))
    unpacked = image.unpack(ARTIFACT)
    with tempfile.TemporaryDirectory(prefix="gpu-check-moved-") as tmp:
        moved = Path(tmp) / "elsewhere"
        shutil.copytree(unpacked, moved)
        config = parse_config((model / "config.pbtxt").read_text(), "config.pbtxt")
        options = tensorrt_provider_options(tensorrt_parameters(config) or {}, device_id=0)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        start = time.perf_counter()
        session = ort.InferenceSession(
            str(moved / CONTEXT_MODEL), so,
            providers=[(TRT_EP, with_caches(options, moved)), (CUDA_EP, {"device_id": "0"})],
        )  # fmt: skip
        x = np.random.default_rng(8).standard_normal((1, 1024)).astype(np.float32)
        got = session.run(None, {"INPUT0": x})[0]
        seconds = time.perf_counter() - start
        providers = session.get_providers()
    path = str(model / "1" / "model.onnx")
    want = ort.InferenceSession(path, providers=[CPU_EP]).run(None, {"INPUT0": x})[0]
    ok = providers[0] == TRT_EP and same(got, want, 1e-2)
    return [
        Row(
            "TensorRT EP-context model, folder moved: loads and runs",
            f"{seconds:.2f} s to session + 1st inference on {providers[0]}",
            "CPU EP outputs",
            "ok" if ok else "FAILED to load moved or mismatch",
            ok=ok,
        )
    ]


def _matches_cpu(label: str, got: np.ndarray, want: np.ndarray, same: bool) -> Row:
    """The row comparing an execution provider's outputs with the CPU EP's."""
    return Row(
        f"{label} outputs == CPU",
        f"max |diff| {np.abs(got - want).max():.2e}",
        "CPU EP",
        "ok" if same else "MISMATCH",
        ok=same,
    )
