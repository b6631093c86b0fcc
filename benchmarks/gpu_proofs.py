"""The device check's proofs that each GPU path really ran on the GPU (benchmarks/gpu_check.py).

Each function returns table rows; `Skipped` says why a row could not run (what is missing on
this machine), anything else raised is a failure. Every proof checks the thing itself, not a
log line: parameters inside the restored device arena, the session's own provider list, the
fallback counters, NVML's list of processes on the GPU, outputs against the CPU.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DEVICE = "cuda:0"
CPU_EP, CUDA_EP, TRT_EP = (
    "CPUExecutionProvider",
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
)


@dataclass
class Row:
    """One line of the table. `ok` False fails the check (a mismatch or an error); `skipped`
    says why it did not run, `hardware` whether that is this machine's hardware (allowed
    under --strict) rather than something missing or the time budget (not allowed)."""

    check: str
    result: str
    baseline: str = ""
    verdict: str = ""
    ok: bool = True
    skipped: str | None = None
    hardware: bool = False
    missing: str | None = None  # the package or tool whose absence skipped it


class Skipped(Exception):
    """A row cannot run here: `missing` names what this machine lacks (a package, a tool);
    `hardware` when it is the hardware (fewer GPUs, too little /dev/shm)."""

    def __init__(self, reason: str, *, missing: str | None = None, hardware: bool = False):
        super().__init__(reason)
        self.missing, self.hardware = missing, hardware


# -- shared helpers ---------------------------------------------------------------------------


def fallbacks(metrics_text: str, model: str) -> float:
    """Sum of `thaw_device_fallbacks_total` for `model` in an exposition."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("thaw_device_fallbacks_total{") and f'model="{model}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def instances(manager: Any, name: str) -> list[Any]:
    """The loaded backends of `name`'s latest version (the check looks inside them)."""
    model = manager._models[name]  # a benchmark may read the manager's own record
    return list(model.versions[model.latest].instances)


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


def torch_linear_model(repo: Path, name: str, *, extra: str = "", export: bool = False,
                       groups: str = "instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]\n",
                       width: int = 256) -> Path:  # fmt: skip
    """A small torch MLP (Linear-ReLU-Linear), TorchScript `model.pt` or exported `model.pt2`,
    input INPUT__0 [width], batch up to 8."""
    import torch

    model_dir = repo / name
    version = model_dir / "1"
    version.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width)
    ).eval()
    if export:
        batch = torch.export.Dim("batch", min=1, max=8)
        program = torch.export.export(
            module, (torch.zeros(2, width),), dynamic_shapes=({0: batch},)
        )
        torch.export.save(program, str(version / "model.pt2"))
        filename = 'default_model_filename: "model.pt2"\n'
    else:
        torch.jit.script(module).save(str(version / "model.pt"))
        filename = ""
    (model_dir / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "pytorch_libtorch"\nmax_batch_size: 8\n{filename}'
        f'input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
        f'output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
        f"{groups}{extra}"
    )
    return model_dir


def cpu_reference(model_dir: Path, x: np.ndarray) -> np.ndarray:
    import torch

    version = model_dir / "1"
    if (version / "model.pt2").exists():
        module = torch.export.load(str(version / "model.pt2")).module()
    else:
        module = torch.jit.load(str(version / "model.pt"), map_location="cpu")
    with torch.inference_mode():
        return np.asarray(module(torch.from_numpy(x)).numpy())


# -- environment ------------------------------------------------------------------------------


def environment_rows(torch: Any) -> list[Row]:
    """Which wheels are installed and which CUDA, cuDNN, TensorRT and driver they bring."""
    from importlib import metadata

    wheels = {}
    for dist in ("onnxruntime", "onnxruntime-gpu", "tensorrt", "tensorrt-cu12", "tensorrt-cu13",
                 "torch", "nvidia-ml-py"):  # fmt: skip
        try:
            wheels[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    try:
        import onnxruntime as ort

        providers = ",".join(
            p.removesuffix("ExecutionProvider") for p in ort.get_available_providers()
        )
    except ImportError:
        providers = "not installed"
    from snapshotter.trt_cache import tensorrt_version

    capability = "sm_{}{}".format(*torch.cuda.get_device_capability(0))
    both = "onnxruntime" in wheels and "onnxruntime-gpu" in wheels
    return [
        Row(
            "environment",
            ", ".join(f"{k} {v}" for k, v in wheels.items())
            + f"; onnxruntime providers {providers}; CUDA {torch.version.cuda}, cuDNN "
            f"{torch.backends.cudnn.version()}, TensorRT {tensorrt_version() or 'none'}",
            f"{torch.cuda.get_device_name(0)} {capability}, {torch.cuda.device_count()} GPU(s), "
            f"driver {_driver()}",
            "BOTH onnxruntime and onnxruntime-gpu: one package directory, the CPU build may "
            "shadow the CUDA EP"
            if both
            else "ok",
            ok=not both,
        )
    ]


def _driver() -> str:
    try:
        import pynvml
    except ImportError:
        return "unknown (nvidia-ml-py not installed)"
    try:
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
    except pynvml.NVMLError as exc:
        return f"unknown ({exc})"
    return version.decode() if isinstance(version, bytes) else str(version)


# -- torch: weights in the device arena -------------------------------------------------------


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


# -- onnxruntime ------------------------------------------------------------------------------


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
    from benchmarks import gpu_models
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

    from benchmarks import gpu_models

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
    from benchmarks import gpu_models
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


# -- CUDA warm-up, graphs, torch.compile, KIND_AUTO, OOM -----------------------------------


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


# -- a fork-server child on the GPU -----------------------------------------------------------


def fork_child_rows(root: Path, work: Path) -> list[Row]:
    """`thaw up --target auto`: a pool process forked by the fork server serves a KIND_AUTO
    model on the GPU (NVML lists that child among the GPU's processes)."""
    import psutil
    import pynvml

    repo = work / "up-models"
    torch_linear_model(repo, "auto_up", groups="")
    argv = [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0", "--target", "auto"]
    argv += ["--warm-pool", "1", "--fork-server", "on", "--preload-frameworks", "torch"]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, env=env, cwd=root)
        try:
            return _forked_on_gpu(proc, psutil, pynvml)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _forked_on_gpu(proc: subprocess.Popen[bytes], psutil: Any, pynvml: Any) -> list[Row]:
    """The answer of one inference through `thaw up`, and whether a process the fork server
    forked is among the processes NVML sees on a GPU."""
    url = _listening(proc, 90)
    _until(lambda: _status(url + "/v2/health/ready") == 200, 120)
    x = np.random.default_rng(12).standard_normal(256).astype(np.float32).tolist()
    tensor = {"name": "INPUT__0", "shape": [1, 256], "datatype": "FP32", "data": x}
    body = {"inputs": [tensor]}
    start = time.perf_counter()
    request = urllib.request.Request(
        url + "/v2/models/auto_up/infer", json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=120) as response:
        answer = json.loads(response.read())
    seconds = time.perf_counter() - start
    children = psutil.Process(proc.pid).children(recursive=True)
    zygotes = [c for c in children if "--fork-server-fd" in " ".join(c.cmdline())]
    forked = {c.pid for z in zygotes for c in z.children()}
    pynvml.nvmlInit()
    on_gpu = set()
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        on_gpu |= {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    ok = bool(forked & on_gpu) and bool(answer.get("outputs"))
    return [
        Row(
            "fork-server child on the GPU (thaw up --target auto, KIND_AUTO model)",
            f"wake + 1st inference {seconds:.2f} s; forked pids {sorted(forked)}, on the "
            f"GPU per NVML {sorted(on_gpu)}",
            "no CUDA in the fork server, CUDA in its child",
            "ok" if ok else "NO FORKED CHILD ON THE GPU",
            ok=ok,
        )
    ]


def _listening(proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    """The URL `thaw up` announces on stdout, within `timeout_s` even if it prints nothing
    (a reader thread: a buffered pipe cannot be waited on line by line with select)."""
    import queue
    import threading

    assert proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.put(raw.decode(errors="replace").strip())

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line.startswith("THAW_LISTENING "):
            return line.removeprefix("THAW_LISTENING ")
    raise RuntimeError("thaw up did not report where it listens")


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except OSError:
        return 0


def _until(predicate: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise RuntimeError(f"not ready within {timeout_s:.0f} s")
