"""Where the native front's CPU per request goes, by stage (issue 26's profiler table): `thaw
serve --front native` with add_sub in its stub, the same closed-loop client as the other
benchmarks, `perf record --call-graph fp` on the front's process, each sample assigned to the
stage its call chain names.

    python benchmarks/front_profile.py [--protocols json,binary,grpc] [--concurrency 1 8]
        [--seconds 8] [--binary PATH]

The front is built a second time with frame pointers (`-C force-frame-pointers=yes`, into
.bench/front-fp; `--binary` names one already built) so that the call chains reach the stage
that made each sample. glibc keeps no frame pointers, so a sample inside malloc or inside a TCP
send or receive whose only user frame is glibc's is counted as "unattributed" rather than
guessed. The front's CPU per request (user+sys from /proc over the measured window, its share
of the run with perf attached: perf costs it some) turns each share into microseconds. Needs
`perf` (linux-perf) and cargo; says so and exits 2 where either is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.load_client import LoadResult, run_grpc_load, run_load  # noqa: E402
from benchmarks.peers import BENCH_DIR, PeerHandle, ThawNativeFrontPeer, free_port  # noqa: E402
from benchmarks.proc_cpu import Counters, tree_counters  # noqa: E402
from benchmarks.workloads import Workload, add_sub_workload, write_add_sub  # noqa: E402

FRONT_PROCESS = "thaw-front"

# The stages, in the order a sample is tried against them: the first group whose pattern names
# any frame of the sample's chain (leaf first) takes it; within a group, the innermost frame
# decides. Specific work first, then waiting, then the runtimes' own dispatch.
STAGES: tuple[tuple[tuple[str, str], ...], ...] = (
    (
        (
            "request check and decode into the execute",
            r"thaw_front::accept::|thaw_front::(hot|grpc)::candidate|prost::message::Message::"
            r"decode|thaw_front::grpc_proto::",
        ),
        (
            "to the stub: header JSON, frame, sendmsg",
            r"thaw_front::wire::(encode|header)|thaw_front::seqpacket::SeqPacket::send",
        ),
        (
            "from the stub: recvmsg, the answer's header JSON",
            r"thaw_front::seqpacket::SeqPacket::recv|thaw_front::relay::take_front_answers|"
            r"thaw_front::wire::(decode|parse)|thaw_front::framing::",
        ),
        (
            "the answer's bytes (JSON, binary, protobuf)",
            r"thaw_front::answer::|thaw_front::hot::http_answer|thaw_front::grpc::send",
        ),
        (
            "statistics and the relay's bookkeeping",
            r"thaw_front::stats::|thaw_front::registry::|thaw_front::relay::",
        ),
        (
            "HTTP/1.1 request read and parse (hyper)",
            r"hyper::proto::h1::conn::Conn<I,B,T>::poll_read|hyper::proto::h1::io::Buffered<T,B>"
            r"::(parse|poll_read)",
        ),
        (
            "HTTP/1.1 answer head and write (hyper)",
            r"hyper::proto::h1::conn::Conn<I,B,T>::(poll_flush|encode_head|write)|"
            r"hyper::proto::h1::(dispatch::Dispatcher<D,Bs,I,T>|io::Buffered<T,B>)::poll_flush",
        ),
        ("HTTP/2 and gRPC framing (h2: read, HPACK, write)", r"^h2::"),
    ),
    (
        (
            "waiting and waking (epoll, tokio's park)",
            r"tokio::runtime::scheduler::current_thread::Context::park|"
            r"tokio::runtime::io::Driver::turn",
        ),
    ),
    (("tokio's task polls and timers, hyper's dispatch", r"^tokio::|^hyper::"),),
)
UNATTRIBUTED = "unattributed: malloc/free, TCP send/receive under glibc (no frame pointers)"
STAGE_NAMES = [name for group in STAGES for name, _ in group] + [UNATTRIBUTED]
_COMPILED = [[(name, re.compile(pattern)) for name, pattern in group] for group in STAGES]


def stage_of(frames: list[str]) -> str:
    """The stage of one sample, from its call chain's symbols (leaf first)."""
    for group in _COMPILED:
        for frame in frames:
            symbol = frame.lstrip("<")
            for name, pattern in group:
                if pattern.search(symbol):
                    return name
    return UNATTRIBUTED


def stage_shares(script: str) -> dict[str, float]:
    """Each stage's share (0..1) of the samples in `perf script -F ip,sym` text."""
    counts: Counter[str] = Counter()
    for block in script.split("\n\n"):
        lines = [line.strip() for line in block.strip().splitlines()]
        frames = [line.split(" ", 1)[1] for line in lines if " " in line]
        if frames:
            counts[stage_of(frames)] += 1
    total = sum(counts.values())
    return {name: counts[name] / total if total else 0.0 for name in STAGE_NAMES}


@dataclass(frozen=True)
class Cell:
    protocol: str
    concurrency: int
    load: LoadResult
    front: Counters
    stub: Counters
    shares: dict[str, float]

    def front_us(self) -> float:
        return self.front.cpu_s / self.load.ok * 1e6 if self.load.ok else 0.0


def build_with_frame_pointers() -> Path:
    """The front built with frame pointers into .bench/front-fp; its path."""
    target = BENCH_DIR / "front-fp"
    env = dict(os.environ, CARGO_TARGET_DIR=str(target))
    env["RUSTFLAGS"] = (env.get("RUSTFLAGS", "") + " -C force-frame-pointers=yes").strip()
    print("building the front with frame pointers (cargo, a minute or two) ...", flush=True)
    subprocess.run(
        ["cargo", "build", "--release", "--quiet"],
        cwd=ROOT / "native" / "front",
        env=env,
        check=True,
    )
    return target / "release" / FRONT_PROCESS


async def run_protocol(
    handle: PeerHandle, workload: Workload, protocol: str, c: int, s: float
) -> LoadResult:
    """`workload` over `protocol` (json, binary, grpc) at concurrency `c` for `s` seconds."""
    if protocol == "grpc":
        assert handle.grpc_address is not None and workload.grpc is not None
        return await run_grpc_load(
            handle.grpc_address, workload.grpc, concurrency=c, duration_s=s, warmup_s=0.5
        )
    payload = workload.binary if protocol == "binary" else workload.payload
    assert payload is not None
    return await run_load(handle.url, payload, concurrency=c, duration_s=s, warmup_s=0.5)


def profile_cell(
    handle: PeerHandle, workload: Workload, protocol: str, concurrency: int, seconds: float
) -> Cell:
    """One protocol at one concurrency: the load with perf on the front, and the split."""
    asyncio.run(run_protocol(handle, workload, protocol, concurrency, 1.0))  # warm every path
    pid = handle.process.pid
    children = psutil.Process(pid).children(recursive=True)
    front_pid = next(p.pid for p in children if p.name() == FRONT_PROCESS)
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "perf.data"
        perf = subprocess.Popen(
            [
                "perf",
                "record",
                "-q",
                "-F",
                "2000",
                "--call-graph",
                "fp",
                "-o",
                str(data),
                "-p",
                str(front_pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)
        _, front0, stub0 = tree_counters(pid, apart=FRONT_PROCESS)
        load = asyncio.run(run_protocol(handle, workload, protocol, concurrency, seconds))
        _, front1, stub1 = tree_counters(pid, apart=FRONT_PROCESS)
        perf.send_signal(signal.SIGINT)
        perf.wait(timeout=60)
        script = subprocess.run(
            ["perf", "script", "-i", str(data), "-F", "ip,sym"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return Cell(protocol, concurrency, load, front1 - front0, stub1 - stub0, stage_shares(script))


def table(cells: list[Cell]) -> str:
    """Stages as rows, cells as columns: the front's µs per request (its share)."""
    heads = [f"{c.protocol} c={c.concurrency}" for c in cells]
    rows = [
        "| stage | " + " | ".join(heads) + " |",
        "|---|" + "---:|" * len(cells),
    ]
    for name in STAGE_NAMES:
        values = [f"{c.shares[name] * c.front_us():.0f} ({c.shares[name]:.0%})" for c in cells]
        rows.append(f"| {name} | " + " | ".join(values) + " |")
    rows.append(
        "| **the front, µs per request** | "
        + " | ".join(f"**{c.front_us():.0f}**" for c in cells)
        + " |"
    )
    rows.append(
        "| the stub, µs per request | "
        + " | ".join(f"{c.stub.cpu_s / c.load.ok * 1e6:.0f}" if c.load.ok else "-" for c in cells)
        + " |"
    )
    rows.append("| req/s | " + " | ".join(f"{c.load.rps:.0f}" for c in cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocols", default="json,binary,grpc")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--binary", type=Path, help="a front built with frame pointers")
    args = parser.parse_args(argv)
    protocols = [p for p in args.protocols.split(",") if p]
    if unknown := set(protocols) - {"json", "binary", "grpc"}:
        parser.error(f"unknown protocols {sorted(unknown)}: json, binary, grpc")
    for tool in ("perf",) + (() if args.binary else ("cargo",)):
        if shutil.which(tool) is None:
            print(f"front_profile: `{tool}` is not installed here", file=sys.stderr)
            return 2
    binary = args.binary or build_with_frame_pointers()
    os.environ["THAW_FRONT_BINARY"] = str(binary)
    workload = add_sub_workload()
    cells = []
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        repo.mkdir()
        write_add_sub(repo)
        handle = ThawNativeFrontPeer().start(
            repo, free_port(), grpc_port=free_port() if "grpc" in protocols else None
        )
        try:
            for protocol in protocols:
                for concurrency in args.concurrency:
                    cell = profile_cell(handle, workload, protocol, concurrency, args.seconds)
                    print(
                        f"{protocol} c={concurrency}: {cell.load.rps:.0f} req/s, front "
                        f"{cell.front_us():.0f} µs/req",
                        flush=True,
                    )
                    cells.append(cell)
        finally:
            handle.stop()
    print()
    print(table(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
