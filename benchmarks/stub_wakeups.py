"""Where a Python model in its stub costs CPU: the sleeps (voluntary context switches) and the CPU
of `thaw serve`'s process and of its stub per request, beside `thaw.python_runtime: in_process`
(the same server with no stub) and, with `--modes ...,triton,native_spike,native_front`, real
Triton's server and its Python stub, decision 0025's spike (a native front before Thaw's own
stub), and `thaw serve --front native` (the front, the server and the stub apart), in the same
run (issue 26).

    python benchmarks/stub_wakeups.py [--concurrency 1 8] [--rounds 3] [--duration-s 4]
        [--modes process,in_process,triton,native_spike,native_front]

Each mode is a server on 127.0.0.1 with add_sub (benchmarks.workloads), loaded in turn by
the same closed-loop aiohttp client over HTTP/JSON (benchmarks.load_client), rounds
interleaved: `thaw serve` with the model in its stub (`process`, the default) or in the
server (`in_process`), or `tritonserver` 2.5x with its python backend (`triton`:
benchmarks.peers TritonPeer, installed into .bench on first use), or the spike (`native_spike`:
benchmarks.peers NativeSpikePeer, built with cargo on first use), or `thaw serve --front native`
(`native_front`: the front built by `make native`). For each cell it reads
every thread of the server's process tree from /proc before and after the measured window:
user+sys CPU and voluntary context switches (each one is the thread going to sleep, so each
is also a wake-up later). Per request it reports, for the server process and for its stubs:
CPU µs and sleeps. Triton's split tells what its C++ server costs apart from its stub: the
most a native request path in front of Thaw's stub (decision 0025) may cost.

Reading it: a request that makes a process sleep and wake costs that process the wake-up as
well as its work (the scheduler, and an interpreter whose caches other processes evicted
meanwhile). In the stub path the server sleeps twice per request at concurrency 1 (waiting for
the client, then for the stub) where `in_process` sleeps once, and the stub once.
The client shares the machine's CPUs: compare cells of one run, never runs on other machines.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.load_client import run_load
from benchmarks.machine import machine_line
from benchmarks.peers import (
    NativeSpikePeer,
    PeerHandle,
    ThawNativeFrontPeer,
    ThawPeer,
    TritonPeer,
    free_port,
)
from benchmarks.proc_cpu import Counters, tree_counters
from benchmarks.serve_throughput import set_python_runtime
from benchmarks.workloads import add_sub_workload, write_add_sub

MODES = ("process", "in_process", "triton", "native_spike", "native_front")
FRONT_PROCESS = "thaw-front"  # the native front's process name: counted apart
DEFAULT_MODES = ("process", "in_process")


@dataclass(frozen=True)
class Cell:
    mode: str
    concurrency: int
    rps: float
    requests: int
    server: Counters
    stubs: Counters
    front: Counters = field(default_factory=Counters)  # the native front (`native_front`)

    def per_request(self) -> tuple[float, float, float, float, float, float]:
        """Server, front and stubs' CPU µs and sleeps, per request."""
        n = max(1, self.requests)
        return (self.server.cpu_s / n * 1e6, self.server.sleeps / n,
                self.front.cpu_s / n * 1e6, self.front.sleeps / n,
                self.stubs.cpu_s / n * 1e6, self.stubs.sleeps / n)  # fmt: skip


def measure(handle: PeerHandle, mode: str, concurrency: int, duration_s: float) -> Cell:
    workload = add_sub_workload()
    pid = handle.process.pid
    snaps: list[tuple[Counters, Counters, Counters]] = []

    def probe() -> float:  # called at the window's start and end
        snaps.append(tree_counters(pid, apart=FRONT_PROCESS))
        return 0.0

    result = asyncio.run(
        run_load(handle.url, workload.payload, concurrency=concurrency, duration_s=duration_s,
                 warmup_s=1.0, cpu_probe=probe)
    )  # fmt: skip
    (server_a, front_a, stubs_a), (server_b, front_b, stubs_b) = snaps
    return Cell(
        mode, concurrency, result.rps, result.ok,
        server_b - server_a, stubs_b - stubs_a, front_b - front_a,
    )  # fmt: skip


def start(mode: str, scratch: Path) -> PeerHandle:
    repo = scratch / mode
    write_add_sub(repo)
    if mode == "triton":
        return TritonPeer().start(repo, free_port())
    if mode == "native_spike":
        return NativeSpikePeer().start(repo, free_port())
    if mode == "native_front":
        return ThawNativeFrontPeer().start(repo, free_port())
    set_python_runtime(repo / "add_sub" / "config.pbtxt", mode)
    return ThawPeer().start(repo, free_port())


def table(cells: list[Cell]) -> str:
    rows = [
        "| mode | concurrency | rounds | req/s | server CPU µs/req | server sleeps/req | "
        "front CPU µs/req | front sleeps/req | stub CPU µs/req | stub sleeps/req | "
        "tree CPU µs/req |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    keys = sorted({(c.mode, c.concurrency) for c in cells}, key=lambda k: (k[1], k[0]))
    for mode, concurrency in keys:
        mine = [c for c in cells if (c.mode, c.concurrency) == (mode, concurrency)]
        per = [c.per_request() for c in mine]
        med = [statistics.median(p[i] for p in per) for i in range(6)]
        rps = statistics.median(c.rps for c in mine)
        rows.append(
            f"| {mode} | {concurrency} | {len(mine)} | {rps:.0f} | {med[0]:.0f} | {med[1]:.2f} | "
            f"{med[2]:.0f} | {med[3]:.2f} | {med[4]:.0f} | {med[5]:.2f} | "
            f"{med[0] + med[2] + med[4]:.0f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=4.0)
    parser.add_argument(
        "--modes",
        default=",".join(DEFAULT_MODES),
        help="comma list of " + ", ".join(MODES) + " (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown mode(s): {', '.join(unknown)}")
    cells: list[Cell] = []
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="thaw-wakeups-") as scratch:
        handles = {mode: start(mode, Path(scratch)) for mode in modes}
        try:
            for _round in range(args.rounds):
                for concurrency in args.concurrency:
                    for mode in modes:
                        cell = measure(handles[mode], mode, concurrency, args.duration_s)
                        cells.append(cell)
                        s_cpu, s_sleeps, f_cpu, f_sleeps, t_cpu, t_sleeps = cell.per_request()
                        print(f"{mode:12s} c={concurrency:<3d} {cell.rps:7.0f} req/s  server "
                              f"{s_cpu:4.0f} µs {s_sleeps:.2f} sleeps  front {f_cpu:4.0f} µs "
                              f"{f_sleeps:.2f} sleeps  stubs {t_cpu:4.0f} µs "
                              f"{t_sleeps:.2f} sleeps", flush=True)  # fmt: skip
        finally:
            for handle in handles.values():
                handle.stop()
    print()
    print(table(cells))
    print(machine_line(load_start, os.getloadavg()[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
