"""The serve-native soak's `thaw serve --front native` (benchmarks/soak_native.py): its
repository of generated models, the process on loopback in explicit model control, and what
the soak reads of it and does to it (loads, unloads, its front's and stubs' pids).

The models, each a role in the soak:

    hot_add_sub, hot_identity   Python, in stubs: answered by the front itself (steady traffic)
    fwd_identity                ONNX: every request forwarded to the server (steady traffic)
    churn_add_sub               Python, unloaded and loaded again and again under traffic
    kill_identity               Python, its stub SIGKILLed now and then under traffic
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from benchmarks.soak_traffic import ModelSpec
from thawwire.handoff_protocol import Surface, listening_url, surface_address

__all__ = ["CHURN", "KILL", "SERVE_MODELS", "STEADY", "Serve", "build_serve_repository"]

ROOT = Path(__file__).resolve().parent.parent

SERVE_MODELS = (
    ModelSpec(
        "hot_add_sub",
        "make_add_sub",
        (("INPUT0", (4,)), ("INPUT1", (4,))),
        ("OUTPUT0", "OUTPUT1"),
        lambda x: [x[0] + x[1], x[0] - x[1]],
        warm=True,
    ),
    ModelSpec(
        "hot_identity",
        "make_python_identity",
        (("INPUT0", (8,)),),
        ("OUTPUT0",),
        lambda x: [x[0]],
        warm=True,
    ),
    ModelSpec(
        "fwd_identity",
        "make_identity_fp32",
        (("INPUT0", (1, 16)),),
        ("OUTPUT0",),
        lambda x: [x[0]],
        warm=True,
    ),
    ModelSpec(
        "churn_add_sub",
        "make_add_sub",
        (("INPUT0", (4,)), ("INPUT1", (4,))),
        ("OUTPUT0", "OUTPUT1"),
        lambda x: [x[0] + x[1], x[0] - x[1]],
        warm=False,
    ),
    ModelSpec(
        "kill_identity",
        "make_python_identity",
        (("INPUT0", (8,)),),
        ("OUTPUT0",),
        lambda x: [x[0]],
        warm=False,
    ),
)
STEADY = tuple(m for m in SERVE_MODELS if m.warm)
CHURN = SERVE_MODELS[3]
KILL = SERVE_MODELS[4]

# The server's log line when a stub is up (runtime/python/stub_backend.py), and when it tells
# the front to answer a version (runtime/process/hot_models.py).
_STUB_READY = re.compile(r"model=(\S+) instance \S+: stub pid (\d+) ready")
_FRONT_SERVES = re.compile(r"model=(\S+) version=\S+: the native front answers its infers")
_STUB_MODULE = "runtime.python.stub.stub_main"
_FRONT_EXE = "thaw-front"


def build_serve_repository(repo: Path) -> None:
    """The soak's models (builders of tests/fixtures' model modules), written once."""
    from tests.fixtures import models, onnx_models

    builders = {
        name: getattr(module, name) for module in (models, onnx_models) for name in module.__all__
    }
    repo.mkdir(parents=True, exist_ok=True)
    for spec in SERVE_MODELS:
        if not (repo / spec.name / "config.pbtxt").is_file():
            builders[spec.builder](repo, spec.name)


class Serve:
    """`thaw serve --front native --model-control-mode explicit` on loopback, every model
    loaded at start; `hostport`, `grpc_address`, `load()`, `unload()`, `stop()`."""

    def __init__(self, repo: Path, *, out: Path, log_level: str = "info") -> None:
        self.log_path = out / "thaw-serve.log"
        argv = [
            sys.executable, "-m", "thaw.cli", "serve", str(repo), "--port", "0",
            "--front", "native", "--model-control-mode", "explicit",
            *(a for m in SERVE_MODELS for a in ("--load-model", m.name)),
            "--log-level", log_level,
        ]  # fmt: skip
        self.argv = argv
        self._log = self.log_path.open("wb")
        self._scanned = 0
        self._stubs: dict[int, str] = {}
        self._serves: dict[str, int] = {}
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=self._log, cwd=ROOT, env=env
        )
        self.url = self.grpc_address = self.metrics_url = ""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 120
        while not (self.url and self.grpc_address) and time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode().strip()
            if not line:
                break
            surface = surface_address(line)
            if surface is not None and surface[0] is Surface.GRPC:
                self.grpc_address = surface[1]
            if line.startswith("THAW_LISTENING_METRICS "):
                self.metrics_url = line.split(" ", 1)[1]
            self.url = self.url or listening_url(line) or ""
        if not self.url or not self.grpc_address:
            self.stop()
            raise RuntimeError(f"thaw serve did not start; see {self.log_path}")
        self.host, port = self.url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)
        self.grpc_port = int(self.grpc_address.rsplit(":", 1)[1])

    @property
    def hostport(self) -> str:
        return self.url.removeprefix("http://")

    def _call(self, path: str, *, post: bool = False) -> tuple[int, bytes]:
        req = urllib.request.Request(
            self.url + path, data=b"{}" if post else None, method="POST" if post else "GET"
        )
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()

    def ready(self) -> bool:
        """Every model ready (the server's own readiness, through the front)."""
        return all(self.model_ready(m.name) for m in SERVE_MODELS)

    def model_ready(self, model: str) -> bool:
        return self._call(f"/v2/models/{model}/ready")[0] == 200

    def load(self, model: str) -> None:
        """POST /v2/repository/models/<model>/load; RuntimeError unless 200."""
        status, body = self._call(f"/v2/repository/models/{model}/load", post=True)
        if status != 200:
            raise RuntimeError(f"load {model}: {status} {body[:300]!r}")

    def unload(self, model: str) -> None:
        """POST /v2/repository/models/<model>/unload; RuntimeError unless 200."""
        status, body = self._call(f"/v2/repository/models/{model}/unload", post=True)
        if status != 200:
            raise RuntimeError(f"unload {model}: {status} {body[:300]!r}")

    def metrics(self) -> str:
        with urllib.request.urlopen(self.metrics_url + "/metrics", timeout=30) as resp:
            return str(resp.read().decode())

    def _scan(self) -> None:
        """Read the server's log on from where the last scan stopped (whole lines only)."""
        with self.log_path.open("rb") as f:
            f.seek(self._scanned)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self._scanned += end
        for line in chunk[:end].decode(errors="replace").splitlines():
            ready = _STUB_READY.search(line)
            if ready:
                self._stubs[int(ready[2])] = ready[1]
            serves = _FRONT_SERVES.search(line)
            if serves:
                self._serves[serves[1]] = self._serves.get(serves[1], 0) + 1

    def stub_pids(self) -> dict[int, str]:
        """Every stub the server said was ready, pid -> model, in order, from its log."""
        self._scan()
        return dict(self._stubs)

    def latest_stub(self, model: str) -> int | None:
        """The pid of `model`'s newest stub (one instance), from the server's log."""
        pids = [pid for pid, name in self.stub_pids().items() if name == model]
        return pids[-1] if pids else None

    def front_serves(self, model: str) -> int:
        """How many times the server told the front to answer `model`'s infers itself."""
        self._scan()
        return self._serves.get(model, 0)

    def processes(self) -> list[tuple[psutil.Process, str]]:
        """The server and its descendants, each with its role: server, front, stub:<model>
        (stub when the log names no model for it yet) or other."""
        root = psutil.Process(self.proc.pid)
        stubs = self.stub_pids()
        out = [(root, "server")]
        for proc in root.children(recursive=True):
            try:
                cmdline = proc.cmdline()
            except psutil.NoSuchProcess:
                continue
            if cmdline and Path(cmdline[0]).name == _FRONT_EXE:
                out.append((proc, "front"))
            elif _STUB_MODULE in cmdline:
                out.append((proc, f"stub:{stubs[proc.pid]}" if proc.pid in stubs else "stub"))
            else:
                out.append((proc, "other"))
        return out

    def pid_of(self, role: str) -> int | None:
        return next((p.pid for p, r in self.processes() if r == role), None)

    def get(self, path: str) -> Any:
        status, body = self._call(path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status}")
        return json.loads(body)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        code = self.proc.wait()
        self._log.close()
        return code
