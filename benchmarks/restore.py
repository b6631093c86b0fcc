"""Restore benchmark: time from "start loading" to a model's first output, Thaw vs the usual paths.

    python benchmarks/restore.py [--gib 1.0] [--work .bench/restore] [--repeats 2] [--skip-s3]
                                 [--only warm,cold,s3,shards] [--pick best|median]
                                 [--shards-gib 4] [--shards 32]

Workloads: a synthetic transformer (TorchScript + safetensors + torch.save, `--gib` of fp32
weights) and a ResNet-50 ONNX (~100 MB; `examples/resnet.py`). Each method runs in a fresh
subprocess that has already imported torch / onnxruntime (a warm-pool process), so the figure is
the load itself plus the first forward. Page cache warm (best of `--repeats`) and cold
(`posix_fadvise(DONTNEED)` on every input file before the run). From S3: nginx on 127.0.0.1
serves the files path-style with `Range` (a real static server; moto is too slow for throughput).
Each row also reports the first forward alone and the worker's CPU seconds with the load average:
on two shared cores a first forward whose OpenMP threads lose a core to another process runs
several times slower (CPU ≈ wall), whatever loaded the weights, so look there before blaming
the load path.

Methods
  raw-read          one thread reading the model file sequentially into fresh memory (floor)
  safetensors       meta-device model + safetensors.torch.load_file + load_state_dict(assign)
  torch-load-mmap   meta-device model + torch.load(mmap=True) + load_state_dict(assign)
  torchscript       torch.jit.load(model.pt)
  onnxruntime       InferenceSession(model.onnx)
  thaw              ImageLoader.restore from the node cache into a fresh arena + weightless graph
  thaw-prefaulted   the same into an arena a warm-pool process pre-faulted beforehand
  runai-streamer    meta-device model + runai_model_streamer.SafetensorsStreamer over the same
                    .safetensors (its defaults: no RUNAI_STREAMER_* variables set) + load_state_dict
  tensorizer        meta-device model + tensorizer.TensorDeserializer(device="cpu", lazy_load=False,
                    num_readers=None: its own dynamic reader count) of a file TensorSerializer wrote
                    at prepare time + load_state_dict(assign)
  s3-runai-streamer the runai-streamer path reading s3://bench/llm.safetensors from the same nginx
                    (runai-model-streamer-s3; path-style, AWS_ENDPOINT_URL)
  s3-boto3          boto3 download_file to disk, then the safetensors path
  s3-thaw           ImageLoader.restore from S3 (ranged GETs into the arena, teed to the cache)
  s3-thaw-prefaulted  the same into a pre-faulted arena (a warm-pool process)

LLM-shaped rows (`shards`, see `restore_sharded`): a synthetic checkpoint of `--shards-gib` GiB in
`--shards` numbered safetensors shards with its index and tokenizer files, restored by thaw and by
`safetensors.torch.load_file` over the same shards, beside a 1 GiB single-file checkpoint's
bandwidth measured the same way in the same run; prints the sharded/single ratio (goal: within 10%).

The peers (runai-streamer, tensorizer) come with the optional extra `pip install -e '.[bench]'`;
without it their rows say "not installed".
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BUCKET = "bench"
D_MODEL = 1536


# --------------------------------------------------------------------------- models
def transformer_class() -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
            att = torch.softmax(q @ k.transpose(-1, -2) / 39.0, dim=-1) @ v
            x = x + self.out(att)
            return x + self.down(torch.relu(self.up(self.ln2(x))))

    class TinyLM(nn.Module):
        def __init__(self, layers: int, d: int = D_MODEL, vocab: int = 32000) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList([Block(d) for _ in range(layers)])
            self.norm = nn.LayerNorm(d)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x)
            return self.norm(x) @ self.embed.weight.t()

    return TinyLM


def layers_for(gib: float) -> int:
    per_layer = 12 * D_MODEL * D_MODEL * 4
    embed = 32000 * D_MODEL * 4
    return max(1, round((gib * (1 << 30) - embed) / per_layer))


def prepare(work: Path, gib: float) -> dict[str, Any]:
    """Generate models and images once per (`work`, `gib`); later runs reuse them."""
    marker = work / f"prepared-{gib}.json"
    if marker.exists():
        return json.loads(marker.read_text())
    import torch
    from safetensors.torch import save_file

    from snapshotter import build_image
    from snapshotter.stores.dir_store import DirStore

    shutil.rmtree(work, ignore_errors=True)
    layers = layers_for(gib)
    print(f"preparing a {layers}-layer transformer (~{gib} GiB) and ResNet-50 under {work}")
    torch.manual_seed(0)
    with torch.no_grad():
        model = transformer_class()(layers).eval()
    (work / "repo" / "llm" / "1").mkdir(parents=True)
    torch.jit.save(torch.jit.script(model), str(work / "repo" / "llm" / "1" / "model.pt"))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(work / "llm.safetensors"))
    torch.save(state, str(work / "llm_state.pt"))
    del model, state
    _resnet_onnx(work / "repo" / "resnet50" / "1" / "model.onnx")
    cache = DirStore(work / "cache")
    for name in ("llm", "resnet50"):
        build_image(work / "repo" / name / "1", cache)
    _nginx_tree(work)
    os.sync()
    info = {"layers": layers, "gib": gib}
    marker.write_text(json.dumps(info))
    return info


def prepare_peers(work: Path) -> None:
    """`llm.tensors`: the same weights written by tensorizer's serializer, once (if installed)."""
    path = work / "llm.tensors"
    if path.exists() or not installed("tensorizer"):
        return
    from safetensors.torch import load_file
    from tensorizer import TensorSerializer

    model = _meta_model(work)
    model.load_state_dict(load_file(str(work / "llm.safetensors")), assign=True)
    partial = path.with_suffix(".partial")
    serializer = TensorSerializer(str(partial))
    serializer.write_module(model)
    serializer.close()
    partial.rename(path)
    os.sync()  # clean pages, so the cold runs can evict them


def _resnet_onnx(path: Path) -> None:
    import torch

    from examples.resnet import resnet50

    path.parent.mkdir(parents=True)
    torch.onnx.export(
        resnet50(), (torch.randn(1, 3, 224, 224),), str(path),
        input_names=["input"], output_names=["output"], dynamo=False,
    )  # fmt: skip


def _nginx_tree(work: Path) -> None:
    """`www/bench/img/...` in the S3 layout (hard links to the cache files) + the safetensors."""
    www = work / "www" / BUCKET
    for chunk in (work / "cache" / "chunks").glob("*/*"):
        if len(chunk.name) == 64:
            (www / "img" / "chunks").mkdir(parents=True, exist_ok=True)
            os.link(chunk, www / "img" / "chunks" / chunk.name)
    for manifest in (work / "cache" / "images").rglob("manifest.json"):
        rel = manifest.relative_to(work / "cache")
        (www / "img" / rel).parent.mkdir(parents=True, exist_ok=True)
        os.link(manifest, www / "img" / rel)
    os.link(work / "llm.safetensors", www / "llm.safetensors")


# --------------------------------------------------------------------------- workers
def _output_digest(out: Any) -> str:
    return hashlib.sha256(out.detach().numpy().tobytes()).hexdigest()[:16]


def _llm_input() -> Any:
    import torch

    return torch.arange(8, dtype=torch.long).reshape(1, 8)


def _meta_model(work: Path) -> Any:
    import torch

    layers = json.loads(next(work.glob("prepared-*.json")).read_text())["layers"]
    with torch.device("meta"):
        return transformer_class()(layers).eval()


def _thaw_ready(work: Path, model: str, loader: Any, arena: Any = None) -> tuple[Any, Any]:
    """Restore `model` and build the runnable thing the way the runtime backends do."""
    import io

    import torch

    from snapshotter.image_ref import ImageRef

    img = loader.restore(ImageRef(model, "1", "cpu"), arena)
    if model == "resnet50":
        import onnxruntime as ort

        options = ort.SessionOptions()
        names = list(img.tensors)
        options.add_external_initializers(
            names, [ort.OrtValue.ortvalue_from_numpy(img.tensors[n]) for n in names]
        )
        return ort.InferenceSession(img.artifact("onnx_graph"), options), img
    t0 = time.perf_counter()
    module = torch.jit.load(io.BytesIO(img.artifact("torchscript_weightless")))
    views = img.torch_tensors()
    with torch.no_grad():
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            tensor.set_(views[name])
    img.timings["attach"] = time.perf_counter() - t0  # weightless archive + views
    return module, img


def _run(model: str, ready: Any) -> str:
    import numpy as np
    import torch

    if model == "resnet50":
        x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
        out = ready.run(None, {"input": x})[0]
        return hashlib.sha256(out.tobytes()).hexdigest()[:16]
    with torch.no_grad():
        return _output_digest(ready(_llm_input()))


def worker(method: str, model: str, work: Path, port: int) -> dict[str, Any]:
    """Run one method in this (fresh) process; imports are done before the clock starts."""
    import onnxruntime  # noqa: F401
    import torch

    from snapshotter import Arena, ImageLoader

    torch.set_num_threads(2)
    for package in PEER_PACKAGES.get(method, ()):
        __import__(package)  # a warm-pool process would have imported it too
    arena = None
    if method in ("thaw-prefaulted", "s3-thaw-prefaulted"):
        loader = ImageLoader(None, work / "cache", "cpu")
        arena = Arena(loader.manifest(_ref(model)).arena_bytes)
        arena.prefault()
    result: dict[str, Any] = {"loadavg": round(os.getloadavg()[0], 2)}
    start, cpu_start = time.perf_counter(), time.process_time()
    if method == "raw-read":
        path = work / ("llm.safetensors" if model == "llm" else "repo/resnet50/1/model.onnx")
        result["bytes"] = _raw_read(path)
        result["output"] = "-"
    else:
        ready = _ready(method, model, work, port, arena, result)
        ready_at = time.perf_counter()
        result["output"] = _run(model, ready)
        result["first_forward"] = time.perf_counter() - ready_at
    result["seconds"] = time.perf_counter() - start
    # CPU seconds of this process over the timed part: about 2x wall while both cores are ours;
    # near 1x (or a slow first forward) means another process took a core meanwhile.
    result["cpu_seconds"] = time.process_time() - cpu_start
    return result


def _ref(model: str) -> Any:
    from snapshotter.image_ref import ImageRef

    return ImageRef(model, "1", "cpu")


def _ready(
    method: str, model: str, work: Path, port: int, arena: Any, result: dict[str, Any]
) -> Any:
    import torch

    from snapshotter import ImageLoader

    if method in ("thaw", "thaw-prefaulted"):
        ready, img = _thaw_ready(work, model, ImageLoader(None, work / "cache", "cpu"), arena)
        result["timings"] = {k: round(v, 4) for k, v in img.timings.items()}
        return ready
    if method in ("s3-thaw", "s3-thaw-prefaulted"):
        from snapshotter.stores.s3_store import S3Config, S3Store

        store = S3Store(f"s3://{BUCKET}/img", S3Config(max_parallel=8))
        loader = ImageLoader(None, work / "s3-cache", "cpu", store=store)
        ready, img = _thaw_ready(work, model, loader, arena)
        result["timings"] = {k: round(v, 4) for k, v in img.timings.items()}
        return ready
    if method == "onnxruntime":
        import onnxruntime as ort

        return ort.InferenceSession(str(work / "repo/resnet50/1/model.onnx"))
    if method == "torchscript":
        return torch.jit.load(str(work / "repo/llm/1/model.pt"))
    if method in ("runai-streamer", "s3-runai-streamer"):
        return _runai_ready(work, method == "s3-runai-streamer")
    if method == "tensorizer":
        return _tensorizer_ready(work)
    path = work / "llm.safetensors"
    if method == "s3-boto3":
        import boto3

        path = work / "s3-download.safetensors"
        boto3.client("s3").download_file(BUCKET, "llm.safetensors", str(path))
    module = _meta_model(work)
    if method == "torch-load-mmap":
        state = torch.load(str(work / "llm_state.pt"), mmap=True, weights_only=True)
    else:
        from safetensors.torch import load_file

        state = load_file(str(path))
    module.load_state_dict(state, assign=True)
    return module


def _runai_ready(work: Path, s3: bool) -> Any:
    """Run:ai's streamer with its defaults. It hands each buffer slot to the caller (owned=True,
    the default), so the yielded tensors are the caller's to keep: views, no copy needed."""
    from runai_model_streamer import SafetensorsStreamer

    module = _meta_model(work)
    source = f"s3://{BUCKET}/llm.safetensors" if s3 else str(work / "llm.safetensors")
    with SafetensorsStreamer() as streamer:
        streamer.stream_file(source)
        state = dict(streamer.get_tensors())
    module.load_state_dict(state, assign=True)
    return module


def _tensorizer_ready(work: Path) -> Any:
    """tensorizer's fastest CPU settings in this version: everything read up front (lazy_load=False)
    by its dynamic number of reader threads (num_readers=None); plaid_mode is a documented no-op
    in tensorizer 2.12 ("left for backwards compatibility")."""
    from tensorizer import TensorDeserializer

    module = _meta_model(work)
    deserializer = TensorDeserializer(
        str(work / "llm.tensors"), device="cpu", lazy_load=False, num_readers=None
    )
    module.load_state_dict(dict(deserializer), assign=True)
    deserializer.close()
    return module


def _raw_read(path: Path) -> int:
    with path.open("rb", buffering=0) as f:
        buf = bytearray(path.stat().st_size)
        view, done = memoryview(buf), 0
        while n := f.readinto(view[done : done + (16 << 20)]):
            done += n
    return done


# --------------------------------------------------------------------------- driver
def drop_page_cache(work: Path) -> None:
    """Evict every file under `work` from the page cache (they were synced, so clean)."""
    for path in work.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def run_worker(method: str, model: str, work: Path, port: int, *, cold: bool) -> dict[str, Any]:
    shutil.rmtree(work / "s3-cache", ignore_errors=True)
    (work / "s3-download.safetensors").unlink(missing_ok=True)
    if cold:
        drop_page_cache(work)
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",  # what runai's S3 client reads
        "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",  # path-style, like the others
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "PYTHONWARNINGS": "ignore",
    }
    cmd = [sys.executable, __file__, "--worker", method, "--model", model, "--work", str(work)]
    out = subprocess.run(
        [*cmd, "--port", str(port)], env=env, capture_output=True, text=True, timeout=300
    )
    if out.returncode != 0:
        raise RuntimeError(f"{method}/{model} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def start_nginx(work: Path) -> tuple[subprocess.Popen[bytes], int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    conf = work / "nginx.conf"
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers must read the work files
    conf.write_text(
        user
        + f"worker_processes 2; daemon off; pid {work}/nginx.pid; error_log {work}/nginx.err;\n"
        "events { worker_connections 256; }\n"
        f"http {{ access_log off; sendfile on; tcp_nopush on; client_body_temp_path {work}/tmp;\n"
        f"  proxy_temp_path {work}/tmp; fastcgi_temp_path {work}/tmp; uwsgi_temp_path {work}/tmp;\n"
        f"  scgi_temp_path {work}/tmp; default_type application/octet-stream;\n"
        f"  server {{ listen 127.0.0.1:{port}; root {work}/www; }} }}\n"
    )
    (work / "tmp").mkdir(exist_ok=True)
    proc = subprocess.Popen(["nginx", "-c", str(conf), "-p", str(work)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("nginx did not start")


PLAN = {
    "llm": [
        "raw-read", "safetensors", "torch-load-mmap", "torchscript", "runai-streamer",
        "tensorizer", "thaw", "thaw-prefaulted",
    ],
    "resnet50": ["raw-read", "onnxruntime", "thaw", "thaw-prefaulted"],
}  # fmt: skip
S3_PLAN = {
    "llm": ["s3-boto3", "s3-runai-streamer", "s3-thaw", "s3-thaw-prefaulted"],
    "resnet50": ["s3-thaw"],
}
# The optional peers (the `bench` extra): a method whose packages are missing shows "not installed".
PEER_PACKAGES = {
    "runai-streamer": ("runai_model_streamer",),
    "s3-runai-streamer": ("runai_model_streamer", "runai_model_streamer_s3"),
    "tensorizer": ("tensorizer",),
}


def installed(method: str) -> bool:
    """False only for a peer method whose optional packages are missing."""
    packages = PEER_PACKAGES.get(method, ())
    return all(importlib.util.find_spec(package) is not None for package in packages)


def measure(work: Path, port: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Best (or median) time per method; the repeats of one group are interleaved (A B C A B C
    ...) so a burst of load from elsewhere on the machine hits every method alike."""
    groups = [(m, state, methods) for m, methods in PLAN.items() for state in ("warm", "cold")]
    if port:
        groups += [(m, "s3", methods) for m, methods in S3_PLAN.items()]
    rows = []
    for model, state, methods in groups:
        if args.only and state not in args.only.split(","):
            continue
        present = [method for method in methods if installed(method)]
        runs: dict[str, list[dict[str, Any]]] = {method: [] for method in present}
        for _ in range(args.repeats):
            for method in present:
                runs[method].append(run_worker(method, model, work, port, cold=state == "cold"))
        for method in methods:
            if method not in runs:
                rows.append({"model": model, "cache": state, "method": method, "missing": True})
                print(f"  {model:9} {state:5} {method:16} not installed", flush=True)
                continue
            ordered = sorted(runs[method], key=lambda r: r["seconds"])
            pick = ordered[0] if args.pick == "best" else ordered[(len(ordered) - 1) // 2]
            rows.append({"model": model, "cache": state, "method": method, **pick})
            _progress(rows[-1])
            for run in runs[method]:
                print(f"    run {run['seconds']:.3f}s load {run['loadavg']}", flush=True)
    return rows


def _progress(row: dict[str, Any]) -> None:
    line = f"  {row['model']:9} {row['cache']:5} {row['method']:16} {row['seconds']:.3f}s"
    forward = f"first forward {row['first_forward']:.3f}s, " if "first_forward" in row else ""
    line += f" ({forward}cpu {row['cpu_seconds']:.3f}s, load {row['loadavg']})"
    print(line, row.get("timings", ""), flush=True)


def table(rows: list[dict[str, Any]], sizes: dict[str, int]) -> str:
    lines = [
        "| model | page cache | method | to first output (s) | of which restore (s) | of which"
        " first forward (s) | CPU s (2 = both cores) | GB/s to output | time vs thaw |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if row.get("missing"):
            lines.append(f"| {row['model']} | {row['cache']} | {row['method']} | not installed |"
                         + " |" * 5)  # fmt: skip
            continue
        ours = "s3-thaw" if row["cache"] == "s3" else "thaw"
        base = next(
            (
                r["seconds"]
                for r in rows
                if (r["model"], r["cache"], r["method"]) == (row["model"], row["cache"], ours)
                and not r.get("missing")
            ),
            None,
        )
        gbps = sizes[row["model"]] / row["seconds"] / 1e9
        restore = row.get("timings", {}).get("total")
        cells = [row["model"], row["cache"], row["method"], f"{row['seconds']:.3f}"]
        forward = row.get("first_forward")
        cells += ["" if restore is None else f"{restore:.3f}"]
        cells += ["" if forward is None else f"{forward:.3f}", f"{row['cpu_seconds']:.2f}"]
        cells.append(f"{gbps:.2f}")
        cells.append("" if base is None else f"{row['seconds'] / base:.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gib", type=float, default=1.0, help="transformer weight size in GiB")
    parser.add_argument("--work", type=Path, default=ROOT / ".bench" / "restore")
    parser.add_argument("--repeats", type=int, default=2, help="runs per method and group")
    parser.add_argument(
        "--pick",
        choices=("best", "median"),
        default="best",
        help="which of the repeats a row shows (median: the lower middle one)",
    )
    parser.add_argument("--skip-s3", action="store_true", help="no nginx / S3 rows")
    parser.add_argument("--only", help="comma list of groups to run: warm,cold,s3,shards")
    parser.add_argument("--shards-gib", type=float, default=4.0, help="sharded checkpoint GiB")
    parser.add_argument("--shards", type=int, default=32, help="shards of that checkpoint")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--shards-worker", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:  # the driver passes the prepared directory itself
        print(json.dumps(worker(args.worker, args.model, args.work.resolve(), args.port)))
        return 0
    from benchmarks import restore_sharded

    if args.shards_worker:
        print(json.dumps(restore_sharded.worker(args.shards_worker, args.work.resolve())))
        return 0
    groups = set(args.only.split(",")) if args.only else {"warm", "cold", "s3", "shards"}
    shards_ok = True
    if "shards" in groups:
        code = restore_sharded.main(__file__, args.work.resolve() / "shards", args)
        shards_ok = code == 0
        if groups == {"shards"}:
            return code
        print()
    work = args.work.resolve() / f"{args.gib}gib"
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    prepare(work, args.gib)
    prepare_peers(work)
    sizes = {
        "llm": (work / "llm.safetensors").stat().st_size,
        "resnet50": (work / "repo/resnet50/1/model.onnx").stat().st_size,
    }
    nginx, port = (None, 0) if args.skip_s3 or not shutil.which("nginx") else start_nginx(work)
    try:
        rows = measure(work, port, args)
    finally:
        if nginx is not None:
            nginx.terminate()
            nginx.wait(10)
    outputs = {(r["model"], r["output"]) for r in rows if r.get("output", "-") != "-"}
    models_ok = all(len({o for m, o in outputs if m == model}) <= 1 for model in PLAN)
    print()
    print(table(rows, sizes))
    print(
        f"\nsame first output from every method: {models_ok}; sizes: "
        + ", ".join(f"{m} {s / 2**20:.0f} MiB" for m, s in sizes.items())
        + f"; {os.cpu_count()} CPUs; {time.perf_counter() - started:.0f}s in all; load average"
        + f" {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    return 0 if models_ok and shards_ok else 1


if __name__ == "__main__":
    sys.exit(main())
