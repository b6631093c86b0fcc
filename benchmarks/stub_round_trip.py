"""The stub round trip without HTTP: a Python model's requests through the scheduler to its stub
process and back, on the server's event loop, beside the same model run in process.

    python benchmarks/stub_round_trip.py [--requests 20000] [--concurrency 8] [--rounds 3]

Both modes serve Triton's `add_sub` example (benchmarks.workloads) in this process, on one
uvloop, as `thaw serve` does: `process` (a stub process, the default) and `in_process` (the
baseline: the same model run inline on the loop, once proven tiny). Each round drives every mode
in turn with `--concurrency` closed-loop callers of `Scheduler.submit`; the report gives, per
mode, the median round's req/s and the CPU each request cost the loop thread and the stub process
(from /proc), then the machine line. serve_throughput.py measures the same model over HTTP beside
Triton; this isolates the server's share of the round trip, which HTTP parsing would drown.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import uvloop

from benchmarks.machine import machine_line
from benchmarks.proc_cpu import stat_cpu_s
from benchmarks.workloads import ADD_SUB_CONFIG, ADD_SUB_ELEMENTS, write_add_sub
from runtime.backends.base import LoadContext
from runtime.inference import InferRequest, InferTensor
from runtime.observe.custom_metrics import CustomMetrics
from runtime.observe.stats import ModelStats
from runtime.python import pb_utils
from runtime.python.backend import PythonBackend
from runtime.python.server_host import ServerHost
from runtime.scheduling.scheduler import Scheduler
from tritonconfig import parse_config

MODES = ("process", "in_process")
_INLINE_MAX_US = 1000  # `thaw serve`'s default: add_sub runs inline in process once proven tiny
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Round:
    """One mode's round: requests per second and CPU microseconds per request."""

    rps: float
    loop_us: float
    stub_us: float


def _cpu_s(pid: int) -> float:
    return stat_cpu_s(Path(f"/proc/{pid}/stat").read_text(), _TICKS_PER_S)


def _children() -> list[int]:
    """This process's child processes (the stubs)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue  # gone meanwhile
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                found.append(int(entry))
    return found


_RNG = np.random.default_rng(7)
_INPUTS = [_RNG.standard_normal(ADD_SUB_ELEMENTS).astype(np.float32) for _ in range(2)]
_EXPECTED = {"OUTPUT0": _INPUTS[0] + _INPUTS[1], "OUTPUT1": _INPUTS[0] - _INPUTS[1]}
_CHECK_EVERY = 64  # answers checked in full (the check would cost more than the round trip)


def _request() -> InferRequest:
    shape = (ADD_SUB_ELEMENTS,)
    names = ("INPUT0", "INPUT1")
    tensors = [InferTensor(n, "FP32", shape, a) for n, a in zip(names, _INPUTS, strict=True)]
    return InferRequest("add_sub", "1", tensors)


async def _load(repo: Path, mode: str) -> tuple[PythonBackend, Scheduler]:
    text = ADD_SUB_CONFIG + (
        f'parameters {{ key: "thaw.python_runtime" value {{ string_value: "{mode}" }} }}\n'
    )
    model_dir = repo / "add_sub"
    ctx = LoadContext(
        "add_sub", "1", model_dir / "1", model_dir, parse_config(text, "config.pbtxt"),
        "KIND_CPU", 0, instance_name="add_sub_0_0",
    )  # fmt: skip
    backend = PythonBackend()
    await asyncio.to_thread(backend.load, ctx)  # a stub is started from a loader thread
    stats = ModelStats()
    return backend, Scheduler("add_sub", "1", [backend], stats, inline_max_us=_INLINE_MAX_US)


async def _drive(scheduler: Scheduler, requests: int, concurrency: int) -> None:
    async def caller(count: int) -> None:
        for index in range(count):
            response = await scheduler.submit(_request(), batch_size=1, received_ns=0)
            if index % _CHECK_EVERY == 0:
                for tensor in response.outputs:
                    if not np.array_equal(tensor.data, _EXPECTED[tensor.name]):
                        raise SystemExit(f"add_sub answered {tensor.name} wrongly")

    await asyncio.gather(*(caller(requests // concurrency) for _ in range(concurrency)))


async def _round(scheduler: Scheduler, stubs: list[int], args: argparse.Namespace) -> Round:
    count = args.requests // args.concurrency * args.concurrency
    stub_start = sum(_cpu_s(pid) for pid in stubs)
    loop_start, wall_start = time.thread_time(), time.perf_counter()
    await _drive(scheduler, count, args.concurrency)
    loop_s, wall_s = time.thread_time() - loop_start, time.perf_counter() - wall_start
    stub_s = sum(_cpu_s(pid) for pid in stubs) - stub_start
    return Round(count / wall_s, 1e6 * loop_s / count, 1e6 * stub_s / count)


async def measure(args: argparse.Namespace) -> dict[str, list[Round]]:
    """Every mode's rounds; the server's host is installed for the run, then the previous one
    is put back (and every stub is unloaded), whatever happens."""
    previous = pb_utils.install_host(ServerHost(None, CustomMetrics()))  # type: ignore[arg-type]
    rounds: dict[str, list[Round]] = {mode: [] for mode in args.modes}
    loaded: dict[str, tuple[PythonBackend, Scheduler]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="thaw-stub-rt-") as scratch:
            repo = Path(scratch)
            write_add_sub(repo)
            stubs = {}
            for mode in args.modes:
                before = set(_children())
                loaded[mode] = await _load(repo, mode)
                stubs[mode] = sorted(set(_children()) - before)
                await _drive(loaded[mode][1], 800, args.concurrency)  # warm up (and prove tiny)
            for index in range(args.rounds):
                shift = index % len(args.modes)
                for mode in args.modes[shift:] + args.modes[:shift]:
                    rounds[mode].append(await _round(loaded[mode][1], stubs[mode], args))
    finally:
        for backend, scheduler in loaded.values():
            scheduler.close()
            await asyncio.to_thread(backend.unload)
        pb_utils.install_host(previous)
    return rounds


def render(rounds: dict[str, list[Round]]) -> str:
    lines = [
        "| mode | req/s (min to max) | loop thread µs/request | stub µs/request |",
        "|---|---:|---:|---:|",
    ]
    for mode, results in rounds.items():
        median = sorted(results, key=lambda r: r.rps)[(len(results) - 1) // 2]
        spread = f"{min(r.rps for r in results):.0f} to {max(r.rps for r in results):.0f}"
        stub = f"{median.stub_us:.1f}" if mode == "process" else "-"
        lines.append(
            f"| {mode} | {median.rps:.0f} ({spread}) | {median.loop_us:.1f} "
            f"(mean {statistics.mean(r.loop_us for r in results):.1f}) | {stub} |"
        )
    return "\n".join(lines)


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000, help="requests per round")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES), help="comma list of " + ",".join(MODES))
    args = parser.parse_args(argv)
    args.modes = [m for m in args.modes.split(",") if m]
    if (
        set(args.modes) - set(MODES)
        or not args.modes
        or not 0 < args.concurrency <= args.requests
        or args.rounds < 1
    ):
        parser.error(f"modes among {', '.join(MODES)}; 0 < concurrency <= requests; rounds >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    load_start = os.getloadavg()[0]
    rounds = uvloop.run(measure(args))
    print(render(rounds))
    print(machine_line(load_start, os.getloadavg()[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
