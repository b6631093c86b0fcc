"""Many bursty models through `thaw up`, dedicated replicas vs shared ones, in one run.

    python benchmarks/density.py [--duration-s 600] [--seed 7] [--big-gib 1.0]
                                 [--work /tmp/thaw_density] [--json OUT]

20 models (the example repository's resnet50, bert and bert_tokenizer and a copy of each, a
TorchScript MLP of --big-gib GiB, and 13 small ONNX models) are driven by the same seeded
bursty trace (benchmarks/density_trace.py: per-model Pareto idle gaps, the shape of Azure
Functions' traffic) through two `thaw up`s started the same way but for each model's
`thaw.placement`: `dedicated` (every replica a process of its own) and `shared` (models packed
into processes within --shared-replica-bytes, idle ones evicted). Measured per run, beside each
other: replica-seconds (serving processes alive x time, sampled every second),
memory-GiB-seconds (their PSS, children included, x time), cold starts (replica starts and
where their weights came from), p50/p99 latency of all requests and of each burst's first,
and requests lost (anything but 200). The last column is shared / dedicated.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from activator.scaler.local_config import SharedSettings  # noqa: E402
from benchmarks.cold_start import Model, _write_big_mlp, binary_infer_body  # noqa: E402
from benchmarks.density_trace import (  # noqa: E402
    Arrival,
    TraceShape,
    awake_sets,
    bins_needed,
    bursty_trace,
)
from benchmarks.machine import machine_line  # noqa: E402
from tests.fixtures.up_process import UpProcess  # noqa: E402

EXAMPLE = [
    Model("resnet50", "model.onnx", "input", (1, 3, 224, 224), "onnxruntime"),
    Model("bert", "model.onnx", "input_ids", (1, 16), "onnxruntime", "INT64", ("attention_mask",)),
    Model("bert_tokenizer", "model.py", "TEXT", (1, 1), "python", "BYTES"),
]
SMALL = 13  # small ONNX models, to 20 with the six example ones and the big MLP
_LOADS = re.compile(r"^thaw_model_loads_total\{([^}]*)\}\s+([0-9.eE+]+)", re.MULTILINE)


def prepare(source: Path, work: Path, big_gib: float) -> tuple[Path, list[Model]]:
    """The 20-model repository (placement unset), built once under `work`."""
    if not (source / "resnet50").is_dir():
        import subprocess

        gen = [sys.executable, str(ROOT / "examples/generate_repository.py"), str(source)]
        subprocess.run(gen, check=True)
    repo = work / "repo"
    models: list[Model] = []
    for m in EXAMPLE:
        for name in (m.name, f"{m.name}_2"):
            if not (repo / name).is_dir():
                shutil.copytree(source / m.name, repo / name)
                config = repo / name / "config.pbtxt"
                config.write_text(
                    config.read_text().replace(f'name: "{m.name}"', f'name: "{name}"')
                )
            models.append(Model(name, m.file, m.input_name, m.shape, m.framework, m.datatype,
                                m.extra_inputs))  # fmt: skip
    _write_big_mlp(repo / "mlp_big", big_gib)
    models.append(Model("mlp_big", "model.pt", "INPUT__0", (1, 4096), "torch"))
    from tests.fixtures.onnx_models import make_onnx_add

    for i in range(SMALL):
        name = f"small_{i}"
        if not (repo / name).is_dir():
            make_onnx_add(repo, name, size=1 << 16)  # 256 KiB of weights
        models.append(Model(name, "model.onnx", "INPUT0", (1, 1 << 16), "onnxruntime"))
    return repo, models


def placed(repo: Path, work: Path, placement: str) -> Path:
    """A copy of `repo` with every model's `thaw.placement` set."""
    out = work / f"repo_{placement}"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(repo, out)
    for config in out.glob("*/config.pbtxt"):
        config.write_text(
            config.read_text()
            + f'\nparameters {{ key: "thaw.placement" value {{ string_value: "{placement}" }} }}\n'
        )
    return out


@dataclass
class RunResult:
    placement: str
    latencies: list[float] = field(default_factory=list)
    first_latencies: list[float] = field(default_factory=list)
    lost: int = 0
    lost_by: dict[str, int] = field(default_factory=dict)  # HTTP status or exception name
    replica_s: float = 0.0
    pss_gib_s: float = 0.0
    peak_replicas: int = 0
    starts: int = 0
    sources: dict[str, int] = field(default_factory=dict)
    shared_evictions: int = 0
    # Every sample: (seconds into the run, serving processes, their PSS in MiB, models awake).
    timeline: list[tuple[float, int, int, int]] = field(default_factory=list)


def _pss(pid: int) -> int:
    """PSS of `pid` and its descendants (Python model stubs are children of a replica)."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as file:
            for line in file:
                if line.startswith(b"Pss:"):
                    total += int(line.split()[1]) * 1024
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except (OSError, ValueError):
        return total
    return total + sum(_pss(int(c)) for c in children)


def _pss_total(pids: Iterable[int]) -> int:
    """PSS of the processes `pids` and their descendants, in bytes."""
    return sum(_pss(p) for p in pids)


def _serving(status: dict[str, Any]) -> dict[int, str]:
    """pid -> URL of every process serving a model now (dedicated replicas, shared ones)."""
    pids = {
        r["pid"]: r["url"]
        for m in status["models"]
        for r in m.get("replicas", [])
        if r.get("pid") and r["state"] != "dead"
    }
    for r in status.get("shared", {}).get("replicas", []):
        pids[r["pid"]] = r["url"]
    return pids


async def _source_of(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """(model, source) load counts of a replica, from its /metrics."""
    try:
        async with session.get(f"{url}/metrics", timeout=aiohttp.ClientTimeout(total=5)) as r:
            text = await r.text()
    except (aiohttp.ClientError, TimeoutError):
        return {}
    counts: dict[str, float] = {}
    for match in _LOADS.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        source = labels.get("source", "?")
        counts[source] = counts.get(source, 0.0) + float(match.group(2))
    return counts


async def _sample(up: UpProcess, result: RunResult, stop: asyncio.Event, period_s: float) -> None:
    seen: dict[int, dict[str, float]] = {}  # dedicated replica pid -> its load counts
    async with aiohttp.ClientSession() as session:
        last = began = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(period_s)
            status = await asyncio.to_thread(up.get, "/thaw/status")
            now = time.perf_counter()
            pids = _serving(status)
            pss = await asyncio.to_thread(_pss_total, tuple(pids))
            result.replica_s += len(pids) * (now - last)
            result.pss_gib_s += pss / 2**30 * (now - last)
            result.peak_replicas = max(result.peak_replicas, len(pids))
            awake = sum(1 for m in status["models"] if m["replicas_ready"])
            result.timeline.append((round(now - began, 1), len(pids), pss >> 20, awake))
            last = now
            if result.placement == "dedicated":
                for pid, url in pids.items():
                    if pid not in seen:
                        seen[pid] = await _source_of(session, url)
    if result.placement == "dedicated":
        for counts in seen.values():
            for source, n in counts.items():
                result.sources[source] = result.sources.get(source, 0) + int(n)


async def _drive(up: UpProcess, trace: list[Arrival], models: dict[str, Model],
                 result: RunResult) -> None:  # fmt: skip
    bodies = {name: binary_infer_body(m) for name, m in models.items()}
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter()

        async def one(arrival: Arrival) -> None:
            await asyncio.sleep(max(0.0, start + arrival.t - time.perf_counter()))
            body, headers = bodies[arrival.model]
            url = f"{up.url}/v2/models/{arrival.model}/infer"
            sent = time.perf_counter()
            try:
                async with session.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                    outcome = str(resp.status)
            except (aiohttp.ClientError, TimeoutError) as exc:
                outcome = type(exc).__name__
            if outcome != "200":
                result.lost += 1
                result.lost_by[outcome] = result.lost_by.get(outcome, 0) + 1
                return
            seconds = time.perf_counter() - sent
            result.latencies.append(seconds)
            if arrival.first:
                result.first_latencies.append(seconds)

        await asyncio.gather(*(one(a) for a in trace))


def run_one(repo: Path, work: Path, placement: str, trace: list[Arrival],
            models: list[Model], args: argparse.Namespace) -> RunResult:  # fmt: skip
    up = UpProcess(
        repo, "--warm-pool", "1", "--cache", str(work / "cache"),
        "--host-cache-bytes", str(args.host_cache_bytes),
        "--scale-to-zero-grace-s", str(args.grace_s),
        "--shared-replica-bytes", str(args.shared_replica_bytes), "--log-level", "warning",
    )  # fmt: skip
    result = RunResult(placement)
    try:
        up.wait_for(
            lambda: all(
                v in ("built", "cached", "no weights")
                for v in up.get("/thaw/status")["image_builds"].values()
            ),
            1800,
            "the start-up image builds",
        )

        async def main() -> None:
            stop = asyncio.Event()
            sampler = asyncio.create_task(_sample(up, result, stop, 1.0))
            await _drive(up, trace, {m.name: m for m in models}, result)
            stop.set()
            await sampler

        asyncio.run(main())
        metrics = up.metrics()
        result.starts = int(sum(float(v) for v in re.findall(
            r'^thaw_replica_starts_total\{[^}]*result="ok"[^}]*\} ([0-9.e+]+)$', metrics,
            re.MULTILINE)))  # fmt: skip
        shared = up.get("/thaw/status").get("shared", {}).get("models", {})
        for counts in shared.values():
            result.shared_evictions += counts["evictions"]
            for source, n in counts["loads"].items():
                result.sources[source] = result.sources.get(source, 0) + n
    finally:
        up.stop()
    return result


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def report(
    results: list[RunResult],
    trace: list[Arrival],
    args: argparse.Namespace,
    load: tuple[float, float],
) -> str:
    d, s = results
    rows: list[tuple[str, float, float]] = [
        ("replica-seconds", d.replica_s, s.replica_s),
        ("memory GiB-seconds (PSS)", d.pss_gib_s, s.pss_gib_s),
        ("peak serving processes", d.peak_replicas, s.peak_replicas),
        ("replica starts (cold starts)", d.starts, s.starts),
        ("evictions", d.shared_evictions, s.shared_evictions),
        ("p50 all requests (ms)", _pct(d.latencies, 50) * 1e3, _pct(s.latencies, 50) * 1e3),
        ("p99 all requests (ms)", _pct(d.latencies, 99) * 1e3, _pct(s.latencies, 99) * 1e3),
        ("p50 first of burst (ms)", _pct(d.first_latencies, 50) * 1e3,
         _pct(s.first_latencies, 50) * 1e3),
        ("p99 first of burst (ms)", _pct(d.first_latencies, 99) * 1e3,
         _pct(s.first_latencies, 99) * 1e3),
        ("requests lost", d.lost, s.lost),
    ]  # fmt: skip
    lines = [
        f"density: {len(trace)} requests ({sum(a.first for a in trace)} bursts) over "
        f"{args.duration_s:g} s, seed {args.seed}, 20 models; scale-to-zero grace "
        f"{args.grace_s:g} s; shared replica budget {args.shared_replica_bytes >> 20} MiB",
        machine_line(*load),
        "",
        "| | dedicated | shared | shared / dedicated |",
        "|---|---:|---:|---:|",
    ]
    for name, dv, sv in rows:
        ratio = f"{sv / dv:.2f}" if dv else "-"
        lines.append(f"| {name} | {dv:,.1f} | {sv:,.1f} | {ratio} |")
    for r in results:
        sources = ", ".join(f"{k} {v}" for k, v in sorted(r.sources.items())) or "-"
        lines.append(f"\nloads by source, {r.placement}: {sources}")
        if r.lost_by:
            lines.append(f"lost, {r.placement}: {r.lost_by}")
    return "\n".join(lines)


def gpu_projection(repo: Path, trace: list[Arrival], grace_s: float, overhead: int) -> str:
    """How many GPUs each placement would need for the same trace (no GPU here: a projection
    from the models' weights, not a measurement): dedicated, one per awake model (one replica
    each, as on CPU); shared, the awake models' weights + overhead packed into 24 GB and 80 GB
    of VRAM (first-fit decreasing), at the peak of the trace."""
    sizes = {
        d.name: sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) + overhead
        for d in repo.iterdir()
        if (d / "config.pbtxt").is_file()
    }
    awake = awake_sets(trace, grace_s)
    dedicated = max((len(s) for s in awake), default=0)
    lines = [f"\nGPU projection (weights + {overhead >> 20} MiB each; awake = a request within "
             f"the {grace_s:g} s grace): dedicated needs {dedicated} GPUs at the peak"]  # fmt: skip
    for gb in (24, 80):
        shared = max((bins_needed([sizes[m] for m in s], gb * 10**9) for s in awake), default=0)
        lines.append(f"  shared, {gb} GB of VRAM each: {shared} GPU(s) at the peak")
    total, largest = sum(sizes.values()), max(sizes.values())
    lines.append(
        f"  all 20 models' footprints together: {total / 2**30:.2f} GiB; a re-wake of the "
        f"largest is one host-to-device copy of {largest / 2**30:.2f} GiB "
        f"(~{largest / 55e9 * 1e3:.0f} ms at the ~55 GB/s pinned PCIe Gen5 ceiling; "
        "not measured here: no GPU)"
    )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration-s", type=float, default=600.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--big-gib", type=float, default=1.0)
    p.add_argument("--grace-s", type=float, default=10.0, help="thaw.scale_to_zero_grace_s")
    p.add_argument("--shared-replica-bytes", type=int, default=SharedSettings().budget_bytes)
    p.add_argument("--host-cache-bytes", type=int, default=6 << 30)
    p.add_argument("--source", type=Path, default=Path("/tmp/thaw_density/source"))
    p.add_argument("--work", type=Path, default=Path("/tmp/thaw_density"))
    p.add_argument("--json", type=Path)
    p.add_argument("--projection-only", action="store_true", help="only the GPU projection")
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    repo, models = prepare(args.source, args.work, args.big_gib)
    trace = bursty_trace([m.name for m in models], args.duration_s, args.seed, TraceShape())
    projection = gpu_projection(repo, trace, args.grace_s, SharedSettings().model_overhead_bytes)
    if args.projection_only:
        print(projection)
        return 0
    load_start = os.getloadavg()[0]
    results = [
        run_one(placed(repo, args.work, placement), args.work, placement, trace, models, args)
        for placement in ("dedicated", "shared")
    ]
    if args.json is not None:
        args.json.write_text(json.dumps([r.__dict__ for r in results], default=str, indent=1))
    print(report(results, trace, args, (load_start, os.getloadavg()[0])))
    print(projection)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
