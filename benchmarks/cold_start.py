"""Cold start through `thaw up` next to a naive cold start and the floor, measured in one run.

    python benchmarks/cold_start.py [--repo model_repository] [--work /tmp/thaw_cold_start]
                                    [--reps 3] [--big-gib 1.0] [--burst 200] [--json OUT]

For each model (resnet50 ONNX from the example repository; a TorchScript MLP of --big-gib GiB
generated here with random weights): first request to a model at zero replicas -> response
through `thaw up` (warm pool + snapshot images built into the cache at start-up), with its
phase breakdown from `/metrics`; a naive cold start (a fresh process: start Python, import the
framework, load the model files, run the first inference); and the floor (reading the model's
bytes with 4 threads into a pre-faulted buffer, plus one warm inference). Then a burst of
--burst requests within 1 s at resnet50 from zero, and the warm-path overhead of the
activator (p50 and throughput through `thaw up` vs straight to the replica) on a tiny model.
Real Triton is measured when `benchmarks/peers.py` has a prepared tritonserver with a backend
for the model; otherwise the table says why not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.machine import machine_line

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from thawwire.handoff_protocol import listening_url  # noqa: E402

PHASES = ("claim", "restore", "warmup", "total")


@dataclass(frozen=True)
class Model:
    name: str
    file: str  # model file inside <name>/1/
    input_name: str
    shape: tuple[int, ...]  # one request's input, batch included
    framework: str  # "onnxruntime" | "torch" | "python"
    datatype: str = "FP32"  # of its one input: FP32, INT64 (ones) or BYTES (a sentence)
    extra_inputs: tuple[str, ...] = ()  # more inputs of the same shape and datatype


def prepare_repo(source: Path, work: Path, big_gib: float) -> tuple[Path, list[Model]]:
    """A repository with resnet50 (copied), a big TorchScript MLP and a tiny ONNX model."""
    repo = work / "repo"
    repo.mkdir(parents=True, exist_ok=True)
    if not (source / "resnet50").is_dir():
        subprocess.run([sys.executable, str(ROOT / "examples/generate_repository.py"), str(source)],
                       check=True)  # fmt: skip
    if not (repo / "resnet50").is_dir():
        shutil.copytree(source / "resnet50", repo / "resnet50")
    models = [Model("resnet50", "model.onnx", "input", (1, 3, 224, 224), "onnxruntime")]
    if big_gib > 0:
        _write_big_mlp(repo / "mlp_big", big_gib)
        models.append(Model("mlp_big", "model.pt", "INPUT__0", (1, 4096), "torch"))
    if not (repo / "tiny").is_dir():
        from tests.fixtures.onnx_models import make_identity_fp32

        make_identity_fp32(repo, "tiny")
    return repo, models


def _write_big_mlp(model_dir: Path, gib: float) -> None:
    """TorchScript: alternating Linear(4096, 8192)/Linear(8192, 4096) + ReLU, ~`gib` GiB."""
    if (model_dir / "1" / "model.pt").is_file():
        return
    import torch

    torch.manual_seed(0)
    pairs = max(1, round(gib * 2**30 / (2 * 4096 * 8192 * 4)))
    layers: list[torch.nn.Module] = []
    for _ in range(pairs):
        layers += [torch.nn.Linear(4096, 8192), torch.nn.ReLU(), torch.nn.Linear(8192, 4096)]
    module = torch.nn.Sequential(*layers).eval()
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    torch.jit.script(module).save(str(model_dir / "1" / "model.pt"))
    (model_dir / "config.pbtxt").write_text(
        'name: "mlp_big"\nplatform: "pytorch_libtorch"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4096 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4096 ] } ]\n'
        'parameters { key: "thaw.max_replicas" value { string_value: "1" } }\n'
    )


# ---- naive cold start and floor ---------------------------------------------------------------

_NAIVE = {
    "onnxruntime": (
        "import numpy as np, onnxruntime as ort\n"
        "s = ort.InferenceSession({path!r}, providers=['CPUExecutionProvider'])\n"
        "s.run(None, {{{name!r}: np.zeros({shape}, np.float32)}})\n"
    ),
    "torch": (
        "import torch\n"
        "m = torch.jit.load({path!r})\n"
        "with torch.no_grad(): m(torch.zeros({shape}))\n"
    ),
}


def naive_cold_start(model: Model, repo: Path) -> float:
    """Seconds from spawning a fresh Python to its first output (what a new pod does)."""
    path = str(repo / model.name / "1" / model.file)
    code = _NAIVE[model.framework].format(path=path, name=model.input_name, shape=model.shape)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code + "print('done', flush=True)"],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    elapsed = time.perf_counter() - start
    if "done" not in proc.stdout:
        raise RuntimeError(f"naive run of {model.name} failed: {proc.stderr[-2000:]}")
    return elapsed


def threaded_read_s(path: Path, threads: int = 4) -> float:
    """Read `path` with `threads` threads into a buffer that was pre-faulted beforehand."""
    size = path.stat().st_size
    buffer = np.ones(size, dtype=np.uint8)  # touching every page pre-faults it
    step = -(-size // threads)

    def read(i: int) -> None:
        with path.open("rb", buffering=0) as f:
            f.seek(i * step)
            view = buffer.data[i * step : min(size, (i + 1) * step)]
            while view:
                n = f.readinto(view)
                if not n:
                    break
                view = view[n:]

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(read, range(threads)))
    return time.perf_counter() - start


def warm_inference_s(model: Model, repo: Path) -> float:
    """Median of 5 inferences in an already loaded model (the compute part of the floor)."""
    path = str(repo / model.name / "1" / model.file)
    x = np.zeros(model.shape, np.float32)
    if model.framework == "onnxruntime":
        import onnxruntime as ort

        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        run = lambda: session.run(None, {model.input_name: x})  # noqa: E731
    else:
        import torch

        module = torch.jit.load(path)
        tx = torch.from_numpy(x)

        def run() -> Any:
            with torch.no_grad():
                return module(tx)

    run()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ---- thaw up ------------------------------------------------------------------------------------


class Up:
    """A `thaw up` process for the benchmark."""

    def __init__(
        self,
        repo: Path,
        cache: Path,
        log: Path,
        *,
        images: bool = True,
        extra: tuple[str, ...] = (),
    ) -> None:
        argv = [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0",
                "--cache", str(cache), "--warm-pool", "1", "--model-control-mode", "explicit",
                "--load-model-at-zero=*",
                "--log-level", os.environ.get("THAW_BENCH_LOG", "warning"), *extra]  # fmt: skip
        if not images:
            argv.append("--no-image-build")
        self.started = time.perf_counter()  # for "first request after thaw up started"
        self._log = log.open("wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, cwd=ROOT)
        assert self.proc.stdout is not None
        # Its gRPC and metrics ports are announced first (thawwire.handoff_protocol).
        url = None
        while url is None and (line := self.proc.stdout.readline().decode()):
            url = listening_url(line)
        if url is None:
            self.stop()
            raise RuntimeError(f"thaw up did not start; see {log}")
        self.url = url

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=30) as resp:
            return json.loads(resp.read())

    def post(self, path: str) -> None:
        request = urllib.request.Request(self.url + path, data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=300) as resp:
            resp.read()

    def ready(self) -> bool:
        """`/v2/health/ready` is 200: the warm pool has produced its first process."""
        try:
            with urllib.request.urlopen(self.url + "/v2/health/ready", timeout=30) as resp:
                return bool(resp.status == 200)
        except urllib.error.HTTPError:
            return False

    def images_settled(self) -> bool:
        """No image is waiting for, or in, its start-up build or pull."""
        states = self.get("/thaw/status")["image_builds"].values()
        return bool(states) and not set(states) & {"queued", "building", "pulling"}

    def model(self, name: str) -> dict[str, Any]:
        return next(m for m in self.get("/thaw/status")["models"] if m["model"] == name)

    def wait(self, predicate: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}: {self.get('/thaw/status')}")
            time.sleep(0.05)

    def cold_and_pool_ready(self, name: str) -> None:
        """Scale `name` to zero and wait for an idle warm-pool process (a fair cold start)."""
        self.post(f"/thaw/models/{name}/scale-to-zero")
        self.wait(lambda: self.model(name)["state"] == "cold", 120, f"{name} cold")
        self.wait(lambda: self.get("/thaw/status")["warm_pool"]["ready"] >= 1, 120, "pool")
        time.sleep(0.5)  # let the refilled process settle (its arena is pre-faulted)

    def phase_sums(self, name: str) -> dict[str, float]:
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as resp:
            text = resp.read().decode()
        sums: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "thaw_cold_start_seconds_sum" and sample.labels["model"] == name:
                    sums[sample.labels["phase"]] = sample.value
        return sums

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def binary_infer_body(model: Model, batch: int = 1) -> tuple[bytes, dict[str, str]]:
    """A v2 request with Triton's binary tensor extension (zeros, ones or a sentence)."""
    shape = [batch, *model.shape[1:]]
    names = (model.input_name, *model.extra_inputs)
    if model.datatype == "BYTES":  # JSON: a string tensor
        body = {"inputs": [{"name": n, "shape": shape, "datatype": "BYTES",
                            "data": ["a cold start under real traffic"] * int(np.prod(shape))}
                           for n in names]}  # fmt: skip
        return json.dumps(body).encode(), {"Content-Type": "application/json"}
    dtype = np.int64 if model.datatype == "INT64" else np.float32
    data = (np.ones if model.datatype == "INT64" else np.zeros)(shape, dtype).tobytes()
    header = json.dumps({
        "inputs": [{"name": n, "shape": shape, "datatype": model.datatype,
                    "parameters": {"binary_data_size": len(data)}} for n in names],
    }).encode()  # fmt: skip
    headers = {"Inference-Header-Content-Length": str(len(header)),
               "Content-Type": "application/octet-stream"}  # fmt: skip
    return header + data * len(names), headers


def timed_infer(url: str, model: Model) -> float:
    body, headers = binary_infer_body(model)
    return timed_post(url, model.name, body, headers)


def timed_post(url: str, model: str, body: bytes, headers: dict[str, str]) -> float:
    """Seconds for one infer request of `model` (RuntimeError unless it answers 200)."""
    request = urllib.request.Request(
        f"{url}/v2/models/{model}/infer", data=body, headers=headers, method="POST"
    )
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=300) as resp:
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{model}: HTTP {resp.status}")
    return time.perf_counter() - start


def thaw_cold_starts(up: Up, model: Model, reps: int) -> list[dict[str, float]]:
    """`reps` cold starts of `model`: end-to-end seconds and the phases of each."""
    runs = []
    for _ in range(reps):
        up.cold_and_pool_ready(model.name)
        before = up.phase_sums(model.name)
        total = timed_infer(up.url, model)
        seen = before["total"]
        up.wait(lambda s=seen: up.phase_sums(model.name)["total"] > s, 30, "metrics")
        after = up.phase_sums(model.name)
        runs.append({"client_s": total, **{p: after[p] - before[p] for p in PHASES}})
    return runs


# ---- burst from zero and warm-path overhead -----------------------------------------------------


async def _burst(url: str, model: Model, count: int, spread_s: float) -> list[tuple[int, float]]:
    import aiohttp

    body, headers = binary_infer_body(model)
    timeout = aiohttp.ClientTimeout(total=300)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

        async def one(i: int) -> tuple[int, float]:
            await asyncio.sleep(i * spread_s / count)
            start = time.perf_counter()
            try:
                async with session.post(
                    f"{url}/v2/models/{model.name}/infer", data=body, headers=headers
                ) as r:
                    await r.read()
                    return r.status, time.perf_counter() - start
            except aiohttp.ClientError:
                return 0, time.perf_counter() - start

        return await asyncio.gather(*(one(i) for i in range(count)))


def burst_from_zero(up: Up, model: Model, count: int) -> dict[str, Any]:
    up.cold_and_pool_ready(model.name)
    results = asyncio.run(_burst(up.url, model, count, 1.0))
    latencies = sorted(t for _, t in results)
    return {
        "requests": count,
        "failed": sum(1 for status, _ in results if status != 200),
        "statuses": sorted({status for status, _ in results}),
        "p50_s": _pct(latencies, 50),
        "p99_s": _pct(latencies, 99),
        "replicas_after": up.model(model.name)["replicas_ready"],
    }


def _pct(sorted_values: list[float], pct: float) -> float:
    index = min(len(sorted_values) - 1, round(pct / 100 * (len(sorted_values) - 1)))
    return sorted_values[index]


async def _latency_and_throughput(
    url: str, model: Model, seconds: float, cpu_s: Callable[[], float] | None = None
) -> dict[str, float]:
    """p50 of 500 sequential requests on one connection, then req/s of 16 clients for
    `seconds`; with `cpu_s` (a reader of the server's CPU seconds) also the server's CPU µs
    per request over the 16-client run."""
    import aiohttp

    body, headers = binary_infer_body(model)
    target = f"{url}/v2/models/{model.name}/infer"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def call() -> None:
            async with session.post(target, data=body, headers=headers) as r:
                await r.read()
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}")

        for _ in range(50):
            await call()
        times = []
        for _ in range(500):
            start = time.perf_counter()
            await call()
            times.append(time.perf_counter() - start)
        done = 0
        stop_at = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < stop_at:
                await call()
                done += 1

        cpu_start = cpu_s() if cpu_s is not None else 0.0
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(16)))
        elapsed = time.perf_counter() - start
        cpu_used = cpu_s() - cpu_start if cpu_s is not None else 0.0
    result = {"p50_ms": statistics.median(times) * 1000, "rps": done / elapsed}
    if cpu_s is not None:
        result["cpu_us"] = cpu_used / done * 1e6
    return result


def warm_overhead(up: Up, model: Model, seconds: float, rounds: int = 3) -> dict[str, Any]:
    """Direct and through-the-activator runs, interleaved `rounds` times; medians of each.

    Interleaving spreads whatever else the machine is doing evenly over both sides. The
    activator side uses `thaw up`'s defaults, so a warm model's connections are handed to the
    replica (direct connections); `benchmarks/warm_path.py` also measures the in-path proxy.
    """
    timed_infer(up.url, model)  # wake it
    replica = up.model(model.name)["replicas"][0]["url"]
    runs: dict[str, list[dict[str, float]]] = {"direct": [], "activator": []}
    for _ in range(rounds):
        runs["direct"].append(asyncio.run(_latency_and_throughput(replica, model, seconds)))
        runs["activator"].append(asyncio.run(_latency_and_throughput(up.url, model, seconds)))
    return {
        side: {key: statistics.median(r[key] for r in rs) for key in ("p50_ms", "rps")}
        for side, rs in runs.items()
    }


# ---- real Triton (only when a prepared tritonserver has the backend) ---------------------------


def triton_cold_start(repo: Path, model: Model) -> float | str:
    """Triton process start -> first response for one model, or why it was not measured."""
    try:
        from benchmarks.peers import TritonPeer
    except ImportError as exc:
        return f"not measured: benchmarks/peers.py unavailable ({exc})"
    peer = TritonPeer()
    if not (peer.server_dir / "bin" / "tritonserver").is_file():
        return "not measured: no prepared tritonserver (.bench/tritonserver)"
    needed = "onnxruntime" if model.framework == "onnxruntime" else "pytorch"
    if needed not in {p.name for p in (peer.server_dir / "backends").iterdir()}:
        return f"not measured: the bundled tritonserver has no {needed} backend"
    one = repo.parent / f"triton_{model.name}"
    if not one.is_dir():
        one.mkdir()
        (one / model.name).symlink_to(repo / model.name)
    start = time.perf_counter()
    handle = peer.start(one, 18123, timeout_s=300)
    try:
        timed_infer("http://127.0.0.1:18123", model)
    finally:
        handle.stop()
    return time.perf_counter() - start


# ---- report -------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict[str, Any]:
    work = args.work
    repo, models = prepare_repo(args.repo, work, args.big_gib)
    results: dict[str, Any] = {"models": {}, "loadavg_start": os.getloadavg()[0]}
    for model in models:
        path = repo / model.name / "1" / model.file
        naive_cold_start(model, repo)  # page cache warm, as in the numbers below
        results["models"][model.name] = {
            "bytes": path.stat().st_size,
            "naive_s": statistics.median(naive_cold_start(model, repo) for _ in range(args.reps)),
            "read_s": min(threaded_read_s(path) for _ in range(3)),
            "warm_inference_s": warm_inference_s(model, repo),
            "triton": triton_cold_start(repo, model) if args.triton else "not requested",
        }
    up = Up(repo, work / "cache", work / "thaw-up.log")
    try:
        up.wait(up.images_settled, 900, "image builds")
        results["image_builds"] = up.get("/thaw/status")["image_builds"]
        for model in models:
            results["models"][model.name]["thaw"] = thaw_cold_starts(up, model, args.reps)
        tiny = Model("tiny", "model.onnx", "INPUT0", (1, 16), "onnxruntime")
        if args.burst:
            results["burst"] = {
                m.name: burst_from_zero(up, m, args.burst) for m in (tiny, models[0])
            }
        results["overhead"] = warm_overhead(up, tiny, args.seconds)
    finally:
        up.stop()
    if args.compare_no_image:  # the warm pool alone: same runs with an empty cache, no builds
        empty = work / "empty_cache"
        shutil.rmtree(empty, ignore_errors=True)
        up = Up(repo, empty, work / "thaw-up-no-image.log", images=False)
        try:
            for model in models:
                results["models"][model.name]["thaw_no_image"] = thaw_cold_starts(
                    up, model, args.reps
                )
        finally:
            up.stop()
    results["loadavg_end"] = os.getloadavg()[0]
    return results


def report(results: dict[str, Any]) -> str:
    lines = [
        "| model | size | thaw up cold start (median) | claim / restore / warmup | naive | "
        "floor (read + warm inference) | Triton | vs naive | vs floor |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results["models"].items():
        runs = r["thaw"]
        med = {k: statistics.median(run[k] for run in runs) for k in ("client_s", *PHASES)}
        floor = r["read_s"] + r["warm_inference_s"]
        triton = r["triton"] if isinstance(r["triton"], str) else f"{r['triton']:.3f} s"
        lines.append(
            f"| {name} | {r['bytes'] / 2**20:.0f} MiB | {med['client_s']:.3f} s | "
            f"{med['claim']:.3f} / {med['restore']:.3f} / {med['warmup']:.3f} s | "
            f"{r['naive_s']:.3f} s | {floor:.3f} s ({r['read_s']:.3f} + "
            f"{r['warm_inference_s']:.3f}) | {triton} | {r['naive_s'] / med['client_s']:.1f}x "
            f"faster | {med['client_s'] / floor:.1f}x |"
        )
    for name, r in results["models"].items():
        if "thaw_no_image" in r:
            runs = r["thaw_no_image"]
            med = {k: statistics.median(run[k] for run in runs) for k in ("client_s", *PHASES)}
            lines.append(
                f"\n{name} through thaw up without images (warm pool + normal load): "
                f"{med['client_s']:.3f} s (claim {med['claim']:.3f} / load {med['restore']:.3f}"
                f" / warmup {med['warmup']:.3f} s)"
            )
    for name, b in results.get("burst", {}).items():
        lines.append(
            f"\nburst from zero ({name}): {b['requests']} requests within 1 s -> p50 "
            f"{b['p50_s']:.3f} s, p99 {b['p99_s']:.3f} s, failed {b['failed']} "
            f"(statuses {b['statuses']}), replicas after: {b['replicas_after']}"
        )
    o = results["overhead"]
    lines.append(
        f"\nwarm path (tiny ONNX model): p50 direct {o['direct']['p50_ms']:.2f} ms, through "
        f"the activator (direct connections) {o['activator']['p50_ms']:.2f} ms (+"
        f"{o['activator']['p50_ms'] - o['direct']['p50_ms']:.2f} ms); throughput direct "
        f"{o['direct']['rps']:.0f} req/s, through the activator {o['activator']['rps']:.0f} "
        f"req/s ({100 * o['activator']['rps'] / o['direct']['rps']:.0f}%)"
    )
    lines.append(f"\nimage builds: {results.get('image_builds')}")
    lines.append(machine_line(results["loadavg_start"], results["loadavg_end"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT / "model_repository")
    parser.add_argument("--work", type=Path, default=Path("/tmp/thaw_cold_start"))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--big-gib", type=float, default=1.0, help="0 skips the big model")
    parser.add_argument("--burst", type=int, default=200, help="0 skips the burst")
    parser.add_argument("--seconds", type=float, default=3.0, help="throughput run length")
    parser.add_argument("--triton", action="store_true", help="also try real Triton")
    parser.add_argument(
        "--compare-no-image",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure thaw up cold starts without snapshot images",
    )
    parser.add_argument("--json", type=Path, default=None, help="write raw results here")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    results = measure(args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
