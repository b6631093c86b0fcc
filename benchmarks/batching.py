"""Dynamic batching: resnet50 at concurrency 32 on `thaw serve` with and without batching, and
on Triton 2.51 with its own dynamic batcher, in one run.

    python benchmarks/batching.py [--repo model_repository] [--concurrency 32]
        [--duration-s 10] [--rounds 3] [--max-queue-delay-us 2000] [--max-batch-size 8]

Three servers on 127.0.0.1, the same `model.onnx` (hard links), the same client
(benchmarks/load_client.py) sending one 3x224x224 image per request in Triton's binary tensor
format, the same answer check (logits equal onnxruntime's on the same file):

    thaw-unbatched   the example config without `dynamic_batching`: one image per session run
    thaw-batched     the same config with `dynamic_batching { max_queue_delay_microseconds }`
    triton-batched   Triton 2.51 (pip `nvidia-pytriton`, no onnxruntime backend): its dynamic
                     batcher with the same settings, the batch run by one onnxruntime session
                     in its python backend (benchmarks/triton_ort_batch_model.py)

Every server keeps one model instance with as many onnxruntime threads as there are cores.
Cells run round-robin, the order rotating each round; each row reports its median round.
The goals printed at the end: thaw-batched >= 1.5x thaw-unbatched, and >= triton-batched.
After the servers stop, the same `model.onnx` runs in this process at batch 1 and at the max
batch size, alternately: what onnxruntime itself gains per image from a batch on this machine,
the ceiling of any batcher's gain here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.load_client import LoadResult, run_load
from benchmarks.peers import (
    BENCH_DIR,
    ROOT,
    PeerError,
    PeerHandle,
    ThawPeer,
    TritonPeer,
    free_port,
)
from benchmarks.serve_report import median_round
from benchmarks.serve_throughput import build_repo
from benchmarks.workloads import Workload, resnet50_workload

logger = logging.getLogger("batching")

UNBATCHED, BATCHED, TRITON = "thaw-unbatched", "thaw-batched", "triton-batched"


class TritonOrtPeer(TritonPeer):
    """Triton 2.51 whose python backend can import onnxruntime (in the same `.bench` venv)."""

    packages = [*TritonPeer.packages, "onnxruntime"]


def resnet50_config(*, backend: str, batching: str, max_batch_size: int) -> str:
    """The example resnet50 config (examples/model_configs.py) for one server."""
    engine = 'platform: "onnxruntime_onnx"' if backend == "onnxruntime" else 'backend: "python"'
    return (
        f'name: "resnet50"\n{engine}\nmax_batch_size: {max_batch_size}\n'
        'input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]\n'
        'output [ { name: "output" data_type: TYPE_FP32 dims: [ 1000 ] } ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n" + batching
    )


def write_repos(args: argparse.Namespace, model_file: Path) -> dict[str, Path]:
    """One repository per server: the same model.onnx, each server's config."""
    batching = f"dynamic_batching {{ max_queue_delay_microseconds: {args.max_queue_delay_us} }}\n"
    mbs = args.max_batch_size
    repos = {}
    for server, backend, text in (
        (UNBATCHED, "onnxruntime", ""),
        (BATCHED, "onnxruntime", batching),
        (TRITON, "python", batching),
    ):
        repo = build_repo(args.run_dir, server, {"resnet50": model_file.parent.parent})
        config = resnet50_config(backend=backend, batching=text, max_batch_size=mbs)
        path = repo / "resnet50" / "config.pbtxt"
        path.unlink()  # a hard link to the example's file: never write through it
        path.write_text(config)
        if backend == "python":
            shutil.copyfile(
                Path(__file__).with_name("triton_ort_batch_model.py"),
                repo / "resnet50" / "1" / "model.py",
            )
        repos[server] = repo
    return repos


@dataclass
class Row:
    server: str
    result: LoadResult | None
    note: str = ""


def start(name: str, repo: Path, args: argparse.Namespace) -> PeerHandle | None:
    peer = TritonOrtPeer() if name == TRITON else ThawPeer()
    try:
        return peer.start(repo, free_port(), timeout_s=args.start_timeout_s)
    except PeerError as exc:
        logger.error("%s did not start: %s", name, exc)
        return None


def first_answer_wrong(url: str, workload: Workload) -> str | None:
    import urllib.request

    request = urllib.request.Request(
        url + workload.payload.path, data=workload.payload.body, headers=workload.payload.headers
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return workload.check(response.read())
    except OSError as exc:
        return f"request failed: {exc}"


def measure(
    handles: dict[str, PeerHandle], workload: Workload, args: argparse.Namespace
) -> dict[str, list[LoadResult]]:
    rounds: dict[str, list[LoadResult]] = {name: [] for name in handles}
    names = list(handles)
    for index in range(args.rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            load = run_load(
                handles[name].url,
                workload.payload,
                concurrency=args.concurrency,
                duration_s=args.duration_s,
                warmup_s=args.warmup_s,
            )
            result = asyncio.run(load)
            logger.info(
                "round %d %-15s %7.1f req/s  p50 %7.1f ms  p99 %7.1f ms  errors %d",
                index + 1, name, result.rps, result.percentile_ms(50),
                result.percentile_ms(99), result.errors,
            )  # fmt: skip
            rounds[name].append(result)
    return rounds


def render(rows: list[Row], concurrency: int) -> str:
    by_name = {row.server: row.result for row in rows if row.result is not None}
    base = by_name.get(UNBATCHED)
    lines = [
        "| model | concurrency | server | req/s | p50 ms | p99 ms | errors | vs thaw-unbatched |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if row.result is None:
            cells = f"| resnet50 | {concurrency} | {row.server} | - | - | - | - |"
            lines.append(f"{cells} {row.note} |")
            continue
        r = row.result
        ratio = f"{r.rps / base.rps:.2f}x" if base is not None and base.rps > 0 else "-"
        lines.append(
            f"| resnet50 | {concurrency} | {row.server} | {r.rps:.1f} | "
            f"{r.percentile_ms(50):.1f} | {r.percentile_ms(99):.1f} | {r.errors} | {ratio} |"
        )
    lines.append("")
    lines.extend(goals(by_name))
    return "\n".join(lines)


def goals(results: dict[str, LoadResult]) -> list[str]:
    """The issue's two goals, each met or not, with the measured ratio."""
    batched, unbatched, triton = (results.get(n) for n in (BATCHED, UNBATCHED, TRITON))
    out = []
    if batched and unbatched and unbatched.rps > 0:
        ratio = batched.rps / unbatched.rps
        out.append(f"goal thaw-batched >= 1.5x thaw-unbatched: {ratio:.2f}x "
                   f"({'met' if ratio >= 1.5 else 'NOT met'})")  # fmt: skip
    if batched and triton and triton.rps > 0:
        ratio = batched.rps / triton.rps
        out.append(f"goal thaw-batched >= triton-batched: {ratio:.2f}x "
                   f"({'met' if ratio >= 1.0 else 'NOT met'})")  # fmt: skip
    return out


def framework_gain(model_file: Path, batch: int, *, seconds: float, rounds: int) -> float:
    """Images/s of one onnxruntime session at `batch` over batch 1 (median of `rounds`
    alternating measurements of `seconds` each), with the servers' thread count."""
    import time

    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])

    def images_per_s(size: int) -> float:
        x = np.random.default_rng(0).standard_normal((size, 3, 224, 224)).astype(np.float32)
        session.run(None, {"input": x})
        start, runs = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            session.run(None, {"input": x})
            runs += 1
        return size * runs / (time.perf_counter() - start)

    ratios = sorted(images_per_s(batch) / images_per_s(1) for _ in range(rounds))
    return ratios[(len(ratios) - 1) // 2]


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repo",
        type=Path,
        default=ROOT / "model_repository",
        help="example repository holding resnet50 (generated if missing)",
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-queue-delay-us", type=int, default=2000)
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--servers", default=f"{UNBATCHED},{BATCHED},{TRITON}")
    parser.add_argument("--start-timeout-s", type=float, default=300.0)
    parser.add_argument("--json", type=Path, help="also write the rows here as JSON")
    args = parser.parse_args(argv)
    known = {UNBATCHED, BATCHED, TRITON}
    servers = args.servers.split(",")
    if not set(servers) <= known or args.rounds < 1 or not 0 < args.concurrency <= 1024:
        parser.error(f"servers among {sorted(known)}; rounds >= 1; concurrency in [1, 1024]")
    if not 1 <= args.max_batch_size <= 64 or args.duration_s <= 0:
        parser.error("max batch size in [1, 64]; duration > 0")
    args.servers = servers
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    model_file = args.repo / "resnet50" / "1" / "model.onnx"
    if not model_file.is_file():
        generator = ROOT / "examples" / "generate_repository.py"
        subprocess.run([sys.executable, str(generator), str(args.repo)], check=True)
    args.run_dir = BENCH_DIR / "runs" / f"batching-{os.getpid()}"
    shutil.rmtree(args.run_dir, ignore_errors=True)
    workload = resnet50_workload(model_file)
    handles: dict[str, PeerHandle] = {}
    rows: list[Row] = []
    try:
        repos = write_repos(args, model_file)
        for name in args.servers:
            handle = start(name, repos[name], args)
            wrong = first_answer_wrong(handle.url, workload) if handle else "did not start"
            if handle is not None and wrong is None:
                handles[name] = handle
                continue
            if handle is not None:
                handle.stop()
            logger.error("%s not measured: %s", name, wrong)
            rows.append(Row(name, None, wrong or ""))
        rounds = measure(handles, workload, args) if handles else {}
        rows = [Row(name, median_round(results)) for name, results in rounds.items()] + rows
    finally:
        for handle in handles.values():
            handle.stop()
        shutil.rmtree(args.run_dir, ignore_errors=True)
    order = {name: i for i, name in enumerate((UNBATCHED, BATCHED, TRITON))}
    rows.sort(key=lambda row: order[row.server])
    print(render(rows, args.concurrency))
    gain = framework_gain(
        model_file, args.max_batch_size, seconds=args.duration_s / 2, rounds=args.rounds
    )
    print(
        f"onnxruntime alone, same threads, batch {args.max_batch_size} vs batch 1: "
        f"{gain:.2f}x the images/s (the ceiling of a batcher's gain on this machine)"
    )
    if args.json:
        args.json.write_text(json.dumps([
            {"server": r.server, "note": r.note,
             "rps": r.result.rps if r.result else None,
             "p50_ms": r.result.percentile_ms(50) if r.result else None,
             "p99_ms": r.result.percentile_ms(99) if r.result else None,
             "errors": r.result.errors if r.result else None}
            for r in rows
        ], indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
