"""Warm-pool refill: fork -> ready of a pool process, and what an idle one costs (PSS), next to a
spawned pool process measured in the same run.

    python benchmarks/pool_refill.py [--repo model_repository] [--forks 10] [--idle 1,2,4]
                                     [--json OUT]

Fork server: the fork server `thaw up` starts (`thaw serve REPO --fork-server-fd FD`,
onnxruntime and torch preloaded, the activator's own ForkServer client) forks --forks pool
processes one after another; each is timed from the fork request to its `/v2/health/ready`
answering 200. Then, with 1, 2 and 4 idle children at once, the PSS (proportional set size:
shared pages divided among the processes sharing them) and the private memory of each idle
child, and the fork server's own PSS.

Baseline, same run: a pool process as it was started before (a fresh `thaw serve` with
`--preload-frameworks onnxruntime,torch`), start -> ready and its PSS, with no arena and with
an arena pre-faulted to the largest model of the repository (the old default). Goal: an idle
pool process <= 100 MB PSS beyond its arena.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import machine_line

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from activator.scaler.launcher import fork_server_command, serve_command  # noqa: E402
from activator.scaler.local.fork_server import ForkServer  # noqa: E402
from activator.scaler.local.replica_process import ReplicaProcess  # noqa: E402

FRAMEWORKS = "onnxruntime,torch"
MiB = 2**20


def memory(pid: int) -> dict[str, int]:
    """PSS and private (dirty + clean) bytes of `pid`, from smaps_rollup."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value, *_ = line.split()
        fields[name.rstrip(":")] = int(value) * 1024
    return {"pss": fields["Pss"], "private": fields["Private_Dirty"] + fields["Private_Clean"]}


def child_args(repo: Path, *extra: str) -> list[str]:
    return [str(repo), "--port", "0", "--model-control-mode", "explicit",
            "--preload-frameworks", FRAMEWORKS, "--log-level", "warning", *extra]  # fmt: skip


async def fork_runs(repo: Path, forks: int, idle_counts: list[int]) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        command = [*fork_server_command(), str(repo), "--preload-frameworks", FRAMEWORKS,
                   "--log-level", "warning"]  # fmt: skip
        started = time.monotonic()
        server = await ForkServer.start(command, timeout_s=300)
        server_ready_s = time.monotonic() - started
        try:
            times = []
            for i in range(forks):
                t0 = time.monotonic()
                child = await server.fork(child_args(repo))
                proc = ReplicaProcess.adopt(child, f"f{i}", [], child.stdout, child.stderr)
                await proc.wait_ready(session, time.monotonic() + 120)
                times.append(time.monotonic() - t0)
                await proc.stop(10)
            pss: dict[int, Any] = {}
            for count in idle_counts:
                procs = []
                for i in range(count):
                    child = await server.fork(child_args(repo))
                    proc = ReplicaProcess.adopt(child, f"i{i}", [], child.stdout, child.stderr)
                    await proc.wait_ready(session, time.monotonic() + 120)
                    procs.append(proc)
                await asyncio.sleep(2.0)  # idle: nothing runs in them now
                pss[count] = {
                    "children": [memory(p.proc.pid) for p in procs],
                    "server": memory(server.proc.pid),
                }
                await asyncio.gather(*(p.stop(10) for p in procs))
        finally:
            await server.close()
    return {"fork_ready_s": times, "server_ready_s": server_ready_s, "idle": pss}


async def spawn_run(repo: Path, arena_bytes: int) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        extra = ("--arena-bytes", str(arena_bytes)) if arena_bytes else ()
        t0 = time.monotonic()
        proc = await ReplicaProcess.spawn([*serve_command(), *child_args(repo, *extra)], "spawn")
        await proc.wait_ready(session, time.monotonic() + 300)
        ready_s = time.monotonic() - t0
        await asyncio.sleep(2.0)
        used = memory(proc.proc.pid)
        await proc.stop(10)
    return {"ready_s": ready_s, **used, "arena_bytes": arena_bytes}


def largest_model_bytes(repo: Path) -> int:
    return max(
        (sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) for d in repo.iterdir()),
        default=0,
    )


def _pool_total(measured: dict[str, Any]) -> int:
    return int(sum(c["pss"] for c in measured["children"]) + measured["server"]["pss"])


def report(r: dict[str, Any]) -> str:
    f = r["fork"]
    times = f["fork_ready_s"]
    lines = [
        "| pool process | start -> ready | PSS idle | private | PSS beyond arena "
        "| goal <= 100 MB |",
        "|---|---|---|---|---|---|",
    ]
    for count, m in f["idle"].items():
        pss = statistics.median(c["pss"] for c in m["children"])
        private = statistics.median(c["private"] for c in m["children"])
        ok = "met" if pss <= 100 * 10**6 else "not met"
        lines.append(
            f"| forked, {count} idle at once | median {statistics.median(times):.3f} s "
            f"(range {min(times):.3f}-{max(times):.3f}, {len(times)} forks) | "
            f"{pss / MiB:.0f} MiB each | {private / MiB:.0f} MiB | "
            f"{pss / MiB:.0f} MiB (no arena) | {ok} |"
        )
    for s in r["spawn"]:
        beyond = (s["pss"] - s["arena_bytes"]) / MiB
        arena = (
            f"arena {s['arena_bytes'] / MiB:.0f} MiB pre-faulted"
            if s["arena_bytes"]
            else "no arena"
        )
        lines.append(
            f"| baseline: spawned, {arena} | {s['ready_s']:.3f} s | {s['pss'] / MiB:.0f} MiB | "
            f"{s['private'] / MiB:.0f} MiB | {beyond:.0f} MiB | "
            f"{'met' if beyond * MiB <= 100 * 10**6 else 'not met'} |"
        )
    servers = {c: m["server"]["pss"] / MiB for c, m in f["idle"].items()}
    lines.append(
        f"\nfork server: ready {f['server_ready_s']:.2f} s after its start; its PSS with 1/2/4 "
        f"idle children: {', '.join(f'{v:.0f}' for v in servers.values())} MiB. Pool memory in "
        "all (PSS sums to what the processes use together): "
        + ", ".join(f"{c} idle: {_pool_total(m) / MiB:.0f} MiB" for c, m in f["idle"].items())
    )
    lines.append(machine_line(*r["load"][:2]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT / "model_repository")
    parser.add_argument("--forks", type=int, default=10)
    parser.add_argument("--idle", default="1,2,4")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if not (args.repo / "resnet50").is_dir():
        import subprocess

        gen = [sys.executable, str(ROOT / "examples/generate_repository.py"), str(args.repo)]
        subprocess.run(gen, check=True)
    results: dict[str, Any] = {"load": [os.getloadavg()[0]]}
    idle = [int(c) for c in args.idle.split(",")]
    results["fork"] = asyncio.run(fork_runs(args.repo, args.forks, idle))
    largest = largest_model_bytes(args.repo)
    results["spawn"] = [asyncio.run(spawn_run(args.repo, a)) for a in (0, largest)]
    results["load"].append(os.getloadavg()[0])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
