"""The servers Triton's client examples run against, each started for one `ServerMode`:
`thaw serve`, `thaw up` (every model at zero) and real Triton 2.51 (`tritonserver` of
nvidia-pytriton, installed by benchmarks/peers.py `TritonPeer`), on free ports or, for examples
that hard-code them, Triton's 8000/8001/8002."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.conformance.client_example_cases import ServerMode
from tests.conformance.qa_checkout import port_in_use
from tests.fixtures.serve_process import ServeProcess, free_port
from tests.fixtures.up_process import UpProcess

__all__ = ["TRITON_PORTS", "Run", "start"]

TRITON_PORTS = (8000, 8001, 8002)


@dataclass(frozen=True)
class Run:
    """A started server: its HTTP, gRPC (and metrics) `HOST:PORT`, its log so far, whether it
    took Triton's fixed ports."""

    http: str
    grpc: str
    log: Callable[[], str]
    fixed_ports: bool
    metrics: str = ""


def _wait_http(url: str, path: str, timeout_s: float, alive: Callable[[], bool]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError("exited before it was ready")
        try:
            with urllib.request.urlopen(url + path, timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{path} not 200 within {timeout_s:.0f} s")


def _ports(fixed: bool) -> tuple[int, int, int, bool]:
    """Triton's ports when `fixed` (an example hard-codes them) and they are free, else free
    ones; and whether they are Triton's."""
    if fixed and not any(port_in_use(p) for p in TRITON_PORTS):
        return (*TRITON_PORTS, True)
    return free_port(), free_port(), free_port(), False


@contextmanager
def _thaw(kind: str, repo: Path, mode: ServerMode, fixed_ports: bool) -> Iterator[Run]:
    http, grpc, metrics, fixed = _ports(fixed_ports)
    args = ["--port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    control = "explicit" if mode.explicit else "none"
    args += ["--log-level", "warning", "--model-control-mode", control, *mode.flags]
    server: ServeProcess | UpProcess
    log: Callable[[], str]
    if kind == "up":
        server = UpProcess(repo, *args, "--warm-pool", "1", "--no-image-build")
        log = server.log
    else:
        server = ServeProcess(repo, *args)
        log = server.logs
        try:
            server.wait_ready(timeout_s=180)
        except RuntimeError:
            server.stop()
            raise
    try:
        yield Run(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", log, fixed, f"127.0.0.1:{metrics}")
    finally:
        server.stop()


@contextmanager
def _triton(repo: Path, mode: ServerMode, fixed_ports: bool) -> Iterator[Run]:
    from benchmarks.peers import PeerError, TritonPeer

    peer = TritonPeer()
    try:
        peer.prepare()
    except PeerError as exc:
        raise RuntimeError(f"Triton is not installed here: {exc}") from exc
    http, grpc, metrics, fixed = _ports(fixed_ports)
    argv = [
        str(peer.server_dir / "bin" / "tritonserver"),
        f"--model-repository={repo}",
        f"--backend-directory={peer.server_dir / 'backends'}",
        f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}",
        "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
        f"--model-control-mode={'explicit' if mode.explicit else 'none'}",
        *mode.flags,
    ]  # fmt: skip
    env = {**os.environ, "PATH": f"{peer.venv / 'bin'}:{os.environ.get('PATH', '')}"}
    env["LD_LIBRARY_PATH"] = str(peer.libs)
    log_path = Path(tempfile.mkstemp(prefix="triton-examples-", suffix=".log")[1])
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

        def stop() -> None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)

        def read_log() -> str:
            return log_path.read_text(errors="replace")

        try:
            _wait_http(
                f"http://127.0.0.1:{http}", "/v2/health/ready", 180, lambda: proc.poll() is None
            )
        except RuntimeError as exc:
            stop()
            raise RuntimeError(f"tritonserver: {exc}: {read_log()[-2000:]}") from exc
        try:
            metrics_at = f"127.0.0.1:{metrics}"
            yield Run(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", read_log, fixed, metrics_at)
        finally:
            stop()


def start(
    target: str, repo: Path, mode: ServerMode, *, fixed_ports: bool
) -> AbstractContextManager[Run]:
    """`target` (serve | up | triton) serving `repo` as `mode` says, on Triton's ports when
    `fixed_ports` and they are free (else free ones); RuntimeError when it does not start."""
    if target == "triton":
        return _triton(repo, mode, fixed_ports)
    return _thaw(target, repo, mode, fixed_ports)
