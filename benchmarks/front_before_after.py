"""Two (or more) builds of the native front, side by side in one run: `thaw serve --front
native` from this checkout with add_sub in its stub, each front binary started in turn (rounds
interleaved, so drift in the machine's load hits every side alike), the same closed-loop client;
per protocol and concurrency the front's CPU per request, the whole tree's (server + front +
stub, from /proc) and the requests per second, medians over rounds.

    python benchmarks/front_before_after.py --binary BEFORE --binary AFTER
        [--cells json:1,binary:1,grpc:1,json:8,binary:8,grpc:8] [--rounds 3] [--seconds 3]

A binary is what `make native` builds (native/front/target/release/thaw-front); build the
before side from another revision with `CARGO_TARGET_DIR=<dir> cargo build --release` in a
`git worktree` of it. The Python side is this checkout's for every binary: this measures the
front alone. (benchmarks/before_after.py compares two whole trees.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.front_profile import run_protocol  # noqa: E402
from benchmarks.peers import PeerHandle, ThawNativeFrontPeer, free_port  # noqa: E402
from benchmarks.proc_cpu import tree_counters  # noqa: E402
from benchmarks.workloads import Workload, add_sub_workload, write_add_sub  # noqa: E402

FRONT_PROCESS = "thaw-front"
PROTOCOLS = ("json", "binary", "grpc")


@dataclass(frozen=True)
class Sample:
    front_us: float
    tree_us: float
    rps: float


def parse_cells(text: str) -> list[tuple[str, int]]:
    """`json:1,grpc:8` → [("json", 1), ("grpc", 8)]; ValueError on anything else."""
    cells = []
    for item in filter(None, text.split(",")):
        protocol, _, concurrency = item.partition(":")
        if protocol not in PROTOCOLS or not concurrency.isdigit() or int(concurrency) < 1:
            raise ValueError(f"a cell is PROTOCOL:CONCURRENCY ({'/'.join(PROTOCOLS)}): {item!r}")
        cells.append((protocol, int(concurrency)))
    if not cells:
        raise ValueError("no cells")
    return cells


def measure_cell(
    handle: PeerHandle, workload: Workload, protocol: str, concurrency: int, seconds: float
) -> Sample:
    """One cell on a running server: the front's and the tree's CPU per request."""
    asyncio.run(run_protocol(handle, workload, protocol, concurrency, 0.5))  # warm the path
    server0, front0, stubs0 = tree_counters(handle.process.pid, apart=FRONT_PROCESS)
    load = asyncio.run(run_protocol(handle, workload, protocol, concurrency, seconds))
    server1, front1, stubs1 = tree_counters(handle.process.pid, apart=FRONT_PROCESS)
    if load.ok == 0:
        raise RuntimeError(f"{protocol} c={concurrency}: no request succeeded")
    front = (front1 - front0).cpu_s
    tree = front + (server1 - server0).cpu_s + (stubs1 - stubs0).cpu_s
    return Sample(front / load.ok * 1e6, tree / load.ok * 1e6, load.rps)


def table(
    binaries: list[str],
    cells: list[tuple[str, int]],
    samples: dict[tuple[str, str, int], list[Sample]],
) -> str:
    """Cells as rows; per binary the front's and the tree's µs per request and req/s."""
    head = ["cell"] + [
        f"{b}: {what}" for b in binaries for what in ("front µs", "tree µs", "req/s")
    ]
    rows = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for protocol, concurrency in cells:
        values = []
        for binary in binaries:
            runs = samples[(binary, protocol, concurrency)]
            values += [
                f"{statistics.median(s.front_us for s in runs):.0f}",
                f"{statistics.median(s.tree_us for s in runs):.0f}",
                f"{statistics.median(s.rps for s in runs):.0f}",
            ]
        rows.append(f"| {protocol} c={concurrency} | " + " | ".join(values) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", action="append", required=True, help="a front (repeatable)")
    parser.add_argument("--cells", default="json:1,binary:1,grpc:1,json:8,binary:8,grpc:8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    try:
        cells = parse_cells(args.cells)
    except ValueError as exc:
        parser.error(str(exc))
    if missing := [b for b in args.binary if not Path(b).is_file()]:
        parser.error(f"no such front binary: {', '.join(missing)}")
    workload = add_sub_workload()
    samples: dict[tuple[str, str, int], list[Sample]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        repo.mkdir()
        write_add_sub(repo)
        for round_ in range(1, args.rounds + 1):
            for binary in args.binary:
                os.environ["THAW_FRONT_BINARY"] = str(Path(binary).resolve())
                handle = ThawNativeFrontPeer().start(repo, free_port(), grpc_port=free_port())
                try:
                    for protocol, concurrency in cells:
                        sample = measure_cell(handle, workload, protocol, concurrency, args.seconds)
                        samples.setdefault((binary, protocol, concurrency), []).append(sample)
                finally:
                    handle.stop()
            print(f"round {round_} of {args.rounds} done", flush=True)
    print(table(args.binary, cells, samples))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
