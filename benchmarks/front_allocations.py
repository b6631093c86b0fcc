"""The native front's heap allocations per hot infer (`add_sub` in its stub, answered by the
front itself): glibc's malloc, calloc and realloc counted with perf's user probes on the front's
process while one client sends `--requests` infers in a row, per protocol, for each front binary
named (the same run, the same client: a before/after is two `--binary`).

    python benchmarks/front_allocations.py [--binary PATH ...] [--protocols json,binary,grpc]
        [--requests 2000]

Default binary: the `make native` build. Needs `perf` and the right to add user probes on
libc (root); says so and exits 2 otherwise. Counts are exact (every call, not samples); the
front's own background work (statistics pulls, timers) over the run is counted too, and is
small against 2,000 requests.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.load_client import Payload  # noqa: E402
from benchmarks.peers import PeerHandle, ThawNativeFrontPeer, free_port  # noqa: E402
from benchmarks.workloads import Workload, add_sub_workload, write_add_sub  # noqa: E402

FRONT_PROCESS = "thaw-front"
ALLOCATORS = ("malloc", "calloc", "realloc")
PROBE_GROUP = "probe_libc"


def libc_path() -> Path:
    """The libc the front links (its loader's search: the first that exists)."""
    for candidate in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6",
                      "/lib64/libc.so.6", "/usr/lib/libc.so.6"):  # fmt: skip
        if Path(candidate).exists():
            return Path(candidate)
    raise RuntimeError("no libc.so.6 found")


def add_probes() -> None:
    """perf's user probes on libc's allocators (kept if already there)."""
    libc = str(libc_path())
    listed = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True).stdout
    for name in ALLOCATORS:
        if f"{PROBE_GROUP}:{name} " in listed:
            continue
        done = subprocess.run(["perf", "probe", "-q", "-x", libc, name], capture_output=True)
        if done.returncode != 0:
            raise RuntimeError(f"perf probe on {name}: {done.stderr.decode().strip()}")


def count_events(data: Path) -> int:
    """The probe hits recorded in `data`."""
    script = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "event"], capture_output=True, text=True
    ).stdout
    return sum(1 for line in script.splitlines() if line.strip())


def _http_sender(handle: PeerHandle, payload: Payload) -> Callable[[int], None]:
    host, port = handle.url.split("//", 1)[1].rsplit(":", 1)

    def send(n: int) -> None:
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            for _ in range(n):
                connection.request("POST", payload.path, body=payload.body, headers=payload.headers)
                answer = connection.getresponse()
                answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"the front answered {answer.status}")
        finally:
            connection.close()

    return send


def _grpc_sender(handle: PeerHandle, workload: Workload) -> Callable[[int], None]:
    assert handle.grpc_address is not None and workload.grpc is not None
    message, method = workload.grpc.message, workload.grpc.method

    def send(n: int) -> None:
        with grpc.insecure_channel(handle.grpc_address) as channel:
            call = channel.unary_unary(method)
            for _ in range(n):
                call(message, timeout=30)

    return send


def per_request(handle: PeerHandle, send: Callable[[int], None], requests: int) -> float:
    """Allocations per request while `send(requests)` runs (after a warm-up)."""
    send(200)
    front = next(
        p for p in psutil.Process(handle.process.pid).children(recursive=True)
        if p.name() == FRONT_PROCESS
    )  # fmt: skip
    events = [arg for name in ALLOCATORS for arg in ("-e", f"{PROBE_GROUP}:{name}")]
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "perf.data"
        perf = subprocess.Popen(
            ["perf", "record", "-q", *events, "-o", str(data), "-p", str(front.pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # perf attached
        send(requests)
        perf.send_signal(signal.SIGINT)
        perf.wait(timeout=60)
        return count_events(data) / requests


def measure(binary: Path, protocols: list[str], requests: int) -> dict[str, float]:
    """Allocations per request of each protocol, with `binary` as the front."""
    os.environ["THAW_FRONT_BINARY"] = str(binary)
    workload = add_sub_workload()
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        repo.mkdir()
        write_add_sub(repo)
        handle = ThawNativeFrontPeer().start(repo, free_port(), grpc_port=free_port())
        try:
            out = {}
            for protocol in protocols:
                if protocol == "grpc":
                    send = _grpc_sender(handle, workload)
                else:
                    payload = workload.binary if protocol == "binary" else workload.payload
                    assert payload is not None
                    send = _http_sender(handle, payload)
                out[protocol] = per_request(handle, send, requests)
            return out
        finally:
            handle.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", type=Path, action="append", help="a front (repeatable)")
    parser.add_argument("--protocols", default="json,binary,grpc")
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args(argv)
    protocols = [p for p in args.protocols.split(",") if p]
    if unknown := set(protocols) - {"json", "binary", "grpc"}:
        parser.error(f"unknown protocols {sorted(unknown)}: json, binary, grpc")
    if shutil.which("perf") is None:
        print("front_allocations: `perf` is not installed here", file=sys.stderr)
        return 2
    try:
        add_probes()
    except RuntimeError as exc:
        print(f"front_allocations: {exc}", file=sys.stderr)
        return 2
    binaries = args.binary or [ROOT / "native" / "front" / "target" / "release" / FRONT_PROCESS]
    results = {binary: measure(binary, protocols, args.requests) for binary in binaries}
    print("| protocol | " + " | ".join(str(b) for b in binaries) + " |")
    print("|---|" + "---:|" * len(binaries))
    for protocol in protocols:
        row = " | ".join(f"{results[b][protocol]:.1f}" for b in binaries)
        print(f"| {protocol} | {row} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
