"""A real `thaw up` process and tiny model helpers for the activator's integration tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from thawwire.handoff_protocol import Surface, surface_address

LISTENING = "THAW_LISTENING "

_BROKEN_PY = """
import os
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if not os.path.exists(os.path.join(args["model_repository"], "FIXED")):
            raise RuntimeError("weights are corrupt (the test model 'broken' is not FIXED)")

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""


def with_params(model_dir: Path, **params: object) -> Path:
    """Append `thaw.<key>` parameters to a model's config.pbtxt."""
    lines = [
        f'parameters {{ key: "thaw.{k}" value {{ string_value: "{v}" }} }}'
        for k, v in params.items()
    ]
    path = model_dir / "config.pbtxt"
    path.write_text(path.read_text() + "\n" + "\n".join(lines) + "\n")
    return model_dir


def make_broken(repo: Path, name: str = "broken") -> Path:
    """Python identity model whose initialize() fails until `<model>/FIXED` exists."""
    model = repo / name
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(textwrap.dedent(_BROKEN_PY).lstrip())
    (model / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
    )
    return model


class UpProcess:
    """`thaw up REPO --port 0 ...`; `url` is where it listens; `stop()` reaps it."""

    def __init__(self, repo: Path, *args: str) -> None:
        self.log_path = Path(tempfile.mkstemp(prefix="thaw-up-", suffix=".log")[1])
        self._log = self.log_path.open("wb")
        argv = [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0", *args]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=self._log, env={**os.environ}
        )
        self.url = ""
        self.grpc_address = ""  # HOST:PORT of its gRPC front door, once announced
        self.metrics_url = ""  # http://HOST:PORT of its metrics port, once announced
        self._listening = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._listening.wait(60):
            self.stop()
            raise RuntimeError(f"thaw up did not start; log: {self.log()}")
        self.wait_for(self.is_ready, 120, "thaw up to be ready (its warm pool primed)")

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/v2/health/ready", timeout=10) as resp:
                return bool(resp.status == 200)
        except urllib.error.HTTPError:
            return False

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").strip()
            surface = surface_address(line)
            if surface is not None and surface[0] is Surface.GRPC:
                self.grpc_address = surface[1]
            elif surface is not None:
                self.metrics_url = surface[1]
            if line.startswith(LISTENING) and not self.url:
                self.url = line[len(LISTENING) :]
                self._listening.set()

    @property
    def hostport(self) -> str:
        return self.url.removeprefix("http://")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as resp:
            return json.loads(resp.read())

    def model(self, name: str) -> dict[str, Any]:
        return next(m for m in self.get("/thaw/status")["models"] if m["model"] == name)

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as resp:
            return str(resp.read().decode())

    def wait_for(self, predicate: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; log: {self.log()}")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        code = self.proc.wait()
        self._log.close()
        return code


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); look at its state.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
