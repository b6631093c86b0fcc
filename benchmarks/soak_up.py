"""The soak's `thaw up` (benchmarks/soak.py): its repository of generated models, the process
on loopback with the soak's flags, and what the soak reads of it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.soak_traffic import MODELS
from thawwire.handoff_protocol import Surface, listening_url, surface_address

__all__ = ["Up", "build_repository", "cold_starts", "wait"]

ROOT = Path(__file__).resolve().parent.parent


def build_repository(repo: Path) -> None:
    """The soak's models (builders of tests/fixtures' model modules), written once."""
    from tests.fixtures import models, onnx_models, torch_models

    builders = {
        name: getattr(module, name)
        for module in (models, onnx_models, torch_models)
        for name in module.__all__
    }
    repo.mkdir(parents=True, exist_ok=True)
    for spec in MODELS:
        if not (repo / spec.name / "config.pbtxt").is_file():
            builders[spec.builder](repo, spec.name)


class Up:
    """`thaw up` on loopback with the soak's flags; `url`, `grpc_address`, `get()`, `stop()`."""

    def __init__(
        self,
        repo: Path,
        *,
        out: Path,
        cache: Path,
        pool_window_s: float,
        grace_s: float,
        activation_timeout_s: float,
    ) -> None:
        self.log_path = out / "thaw-up.log"
        argv = [
            sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0",
            "--cache", str(cache), "--warm-pool", "1",
            "--pool-window-s", str(pool_window_s), "--scale-to-zero-grace-s", str(grace_s),
            "--stable-window-s", "6", "--activation-timeout-s", str(activation_timeout_s),
            "--max-body-bytes", str(4 << 20), "--log-level", "warning",
        ]  # fmt: skip
        self.argv = argv
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, cwd=ROOT)
        self.url = ""
        self.grpc_address = ""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 120
        while not self.url and time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode()
            if not line:
                break
            surface = surface_address(line.strip())
            if surface is not None and surface[0] is Surface.GRPC:
                self.grpc_address = surface[1]
            self.url = listening_url(line.strip()) or ""
        if not self.url or not self.grpc_address:
            self.stop()
            raise RuntimeError(f"thaw up did not start; see {self.log_path}")
        self.host, port = self.url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)
        self.grpc_port = int(self.grpc_address.rsplit(":", 1)[1])

    @property
    def hostport(self) -> str:
        return self.url.removeprefix("http://")

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=30) as resp:
            body = resp.read()
        return json.loads(body) if path != "/metrics" else body.decode()

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/v2/health/ready", timeout=30) as resp:
                return bool(resp.status == 200)
        except urllib.error.HTTPError:
            return False

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


def wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `predicate` every 0.1 s; RuntimeError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def cold_starts(metrics_text: str) -> dict[str, int]:
    """Each model's completed cold starts, from `thaw up`'s /metrics text."""
    from prometheus_client.parser import text_string_to_metric_families

    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(metrics_text):
        for s in family.samples:
            if s.name == "thaw_cold_start_seconds_count" and s.labels.get("phase") == "total":
                counts[s.labels["model"]] = int(s.value)
    return counts
