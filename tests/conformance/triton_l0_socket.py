"""Triton's qa/L0_socket against `thaw serve` (and, `--server up`, `thaw up`): which
combinations of ports and addresses start, which are refused, and `--reuse-http-port` /
`--reuse-grpc-port` spreading clients over three servers on one port.

    unshare -n sh -c 'ip link set lo up && .venv/bin/python -m tests.conformance.triton_l0_socket \
        [--server serve --server up]'

test.sh is read from the server mirror (`--mirror`, default `$TRITON_SERVER_MIRROR`) only to
check that the suite exists at `--ref`; without it the run says so and exits 0. Its starts are
written out here in test.sh's order (`STARTS`), with the `simple` model
(tests/fixtures/client_example_models) as its repository. A start test.sh expects to come up
must be ready over HTTP when HTTP is on (its `run_server`), else still running after
`ALIVE_S` (its `run_server_nowait` and `sleep 15`, shortened); one it expects refused must
exit non-zero. Then, as test.sh does for each protocol, three servers share the HTTP and gRPC
ports (`--reuse-*-port=true`, metrics on 8002, 0.0.0.0:8003 and 127.0.0.2:8004): eleven
clients each open a connection and infer, and every server must have answered at least one.
`thaw up` runs with its models at zero (one warm-pool process, no image build): each of the
three wakes its own replica for the clients that reach it. Through `thaw up` the eight starts
with `--allow-http 0` are refused on purpose (`UP_REFUSES`: its HTTP port is the front door)
and counted apart. It uses Triton's fixed ports (8000-8007) and 127.0.0.2 and 127.0.0.3 (on
Linux all of 127.0.0.0/8 is the loopback): run it in a network namespace of its own, as above.

Exit status: 1 when a step did not go as test.sh expects.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.conformance.qa_checkout import git_show
from tests.conformance.qa_servers import add_server_argument
from tests.fixtures.client_example_models import write_repository

__all__ = ["STARTS", "UP_REFUSES", "Start", "main", "up_differs"]

SUITE = "qa/L0_socket/test.sh"
ALIVE_S = 4.0  # test.sh sleeps 15 s before it looks; a refused start exits well within this
READY_S = 60.0

_SAME = "--http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1"
_DIFF = "--http-address 127.0.0.1 --grpc-address 127.0.0.2 --metrics-address 127.0.0.3"


@dataclass(frozen=True)
class Start:
    """One server start of test.sh: its flags and whether it must come up."""

    flags: str
    starts: bool
    ready_url: str = ""  # where test.sh checks readiness (or run_server would), if it does


def _starts() -> list[Start]:
    """test.sh's loop over `address` (default, explicit) and `p` (http, grpc), in order."""
    out: list[Start] = []
    http_ready = "http://127.0.0.1:8000/v2/health/ready"
    for explicit in (False, True):
        same = _SAME if explicit else ""
        for p in ("http", "grpc"):
            other_port = "8001" if p == "http" else "8000"
            flag = "address" if explicit else "port"
            out.append(Start(f"--{p}-{flag} -47 --allow-{p} 0", True))
            grpc_only = f"{same} --{p}-port {other_port} --allow-{p} 0"
            out.append(Start(grpc_only, True, http_ready if p == "grpc" else ""))
            out.append(Start(f"{same} --{p}-port {other_port}", False))
            if explicit:
                out.append(Start(f"{_DIFF} --{p}-port {other_port}", True))
            first, second = ("http", "grpc") if p == "http" else ("grpc", "http")
            ready = "http://127.0.0.1:8007/v2/health/ready" if p == "grpc" else ""
            out.append(Start(f"{same} --{first}-port 8007 --{second}-port 8007 --allow-{p} 0",
                             True, ready))  # fmt: skip
            if p == "http":
                out.append(Start(f"{same} --http-port 8003 --grpc-port 8003", False))
            if explicit:
                out.append(Start(f"{_DIFF} --{first}-port 8007 --{second}-port 8007", True,
                                 "http://127.0.0.1:8007/v2/health/ready"))  # fmt: skip
            out.append(Start(f"{same} --{p}-port 8002 --allow-{p} 0", True,
                             http_ready if p == "grpc" else ""))  # fmt: skip
            out.append(Start(f"{same} --{p}-port 8002", False))
            if explicit and p == "grpc":
                out.append(Start(f"{_DIFF} --grpc-port 8002", True, http_ready))
            metrics_port = "8000" if p == "http" else "8001"
            out.append(Start(f"{same} --metrics-port {metrics_port} --allow-metrics 0", True,
                             http_ready))  # fmt: skip
            out.append(Start(f"{same} --metrics-port {metrics_port}", False))
            if explicit and p == "grpc":
                out.append(Start(f"{_DIFF} --metrics-port 8001", True, http_ready))
    return out


STARTS = _starts()

# A flag thaw up refuses on purpose where test.sh expects tritonserver to start.
UP_REFUSES = "--allow-http 0"


def up_differs(kind: str, start: Start) -> bool:
    """Whether `start` is one `thaw <kind>` refuses on purpose (test.sh expects it to start)."""
    return kind == "up" and start.starts and UP_REFUSES in start.flags


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _serve(kind: str, repo: Path, flags: str, log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "thaw.cli", kind, f"--model-repository={repo}"]
    if kind == "up":  # every model at zero; one warm-pool process; its cache beside the repo
        argv += ["--warm-pool", "1", "--preload-frameworks", "", "--no-image-build",
                 "--cache", str(repo.parent / "cache")]  # fmt: skip
    argv += flags.split()
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_start(start: Start, repo: Path, log: Path, kind: str = "serve") -> tuple[bool, str]:
    """(as test.sh expects, or as `up_differs` keeps it, why) for one start."""
    proc = _serve(kind, repo, start.flags, log)
    try:
        deadline = time.monotonic() + (READY_S if start.ready_url else ALIVE_S)
        while time.monotonic() < deadline and proc.poll() is None:
            if start.ready_url and _ready(start.ready_url):
                break
            time.sleep(0.2)
        up = proc.poll() is None and (not start.ready_url or _ready(start.ready_url))
    finally:
        _stop(proc)
    last = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
    if up == (start.starts and not up_differs(kind, start)):
        return True, "started" if up else f"refused: {last[0][:120]}"
    return False, "started, expected refused" if up else f"did not start: {last[0][:160]}"


def _infer(protocol: str) -> None:
    """One new connection and one `simple` inference, as test.sh's client scripts do."""
    if protocol == "http":
        import tritonclient.http as client
    else:
        import tritonclient.grpc as client  # type: ignore[no-redef]
    url = "localhost:8000" if protocol == "http" else "localhost:8001"
    conn = client.InferenceServerClient(url)
    try:
        inputs = [client.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in (0, 1)]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.ones((1, 16), np.int32))
        conn.infer("simple", inputs)
    finally:
        conn.close()


def _successes(url: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    rows = [r for r in text.splitlines() if r.startswith("nv_inference_request_success{")]
    return sum(float(r.rsplit(" ", 1)[1]) for r in rows)


def run_reuse(protocol: str, repo: Path, log: Path, kind: str = "serve") -> tuple[bool, str]:
    """Three servers on the same ports: every one answers some of eleven clients."""
    metrics = (("--metrics-port 8002", "http://127.0.0.1:8002/metrics"),
               ("--metrics-address 0.0.0.0 --metrics-port 8003", "http://127.0.0.1:8003/metrics"),
               ("--metrics-address 127.0.0.2 --metrics-port 8004",
                "http://127.0.0.2:8004/metrics"))  # fmt: skip
    reuse = "--reuse-http-port=true --reuse-grpc-port=true"
    procs = [_serve(kind, repo, f"{flags} {reuse}", log) for flags, _ in metrics]
    try:
        deadline = time.monotonic() + READY_S
        while not all(_ready(url) for _, url in metrics):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                return False, "the three servers did not all start"
            time.sleep(0.2)
        ready = time.monotonic() + READY_S
        while not _ready("http://127.0.0.1:8000/v2/models/simple/ready"):
            if time.monotonic() > ready:
                return False, "simple never ready"
            time.sleep(0.2)
        for _ in range(11):
            _infer(protocol)
        counts = [_successes(url) for _, url in metrics]
    finally:
        for proc in procs:
            _stop(proc)
    ok = all(c > 0 for c in counts)
    return ok, f"successes per server {counts}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--mirror", type=Path, default=os.environ.get("TRITON_SERVER_MIRROR", ""))
    parser.add_argument("--ref", default="v2.51.0")
    add_server_argument(parser)
    args = parser.parse_args(argv)
    if str(args.mirror) in ("", ".") or git_show(args.mirror, args.ref, SUITE) is None:
        print(f"skipped: no Triton server mirror with {SUITE} at {args.ref} (--mirror or "
              "$TRITON_SERVER_MIRROR)", file=sys.stderr)  # fmt: skip
        return 0
    failed = 0
    for kind in args.server or ["serve"]:
        failed += _run_kind(kind)
    return 1 if failed else 0


def _run_kind(kind: str) -> int:
    """test.sh's steps on `thaw <kind>`; 1 when one did not go as expected."""
    results: list[tuple[str, bool, str]] = []
    kept = 0
    with tempfile.TemporaryDirectory(prefix="thaw-l0-socket-") as tmp:
        repo = write_repository(Path(tmp) / "models", ("simple",))
        log = Path(tmp) / "server.log"
        for start in STARTS:
            ok, why = run_start(start, repo, log, kind)
            differs = up_differs(kind, start)
            kept += ok and differs
            results.append((start.flags.strip(), ok, why))
            mark = ("kept" if differs else "ok") if ok else "FAILED"
            print(f"{kind:5} {mark:6} {start.flags.strip():90} {why}", flush=True)
        for protocol in ("http", "grpc"):
            ok, why = run_reuse(protocol, repo, log, kind)
            results.append((f"reuse ports, {protocol} clients", ok, why))
            print(f"{kind:5} {'ok' if ok else 'FAILED':6} reuse ports, {protocol} clients: {why}",
                  flush=True)  # fmt: skip
    good = sum(ok for _, ok, _ in results)
    note = f" ({kept} refused on purpose: {UP_REFUSES})" if kept else ""
    print(f"{kind}: {good - kept}/{len(results)} steps as test.sh expects{note}")
    return 0 if good == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
