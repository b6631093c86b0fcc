"""A direct `thaw serve` of the activator tests' repository, to compare `thaw up`'s answers with
(the `serve` fixture of tests/integration/activator/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import requests

__all__ = ["ServeBeside"]


class ServeBeside:
    """A direct `thaw serve` of the same repository, to compare answers with."""

    def __init__(self, repo: Path) -> None:
        argv = [sys.executable, "-m", "thaw.cli", "serve", str(repo), "--port", "0"]
        argv += ["--log-level", "error"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode().strip()
            if line.startswith("THAW_LISTENING "):
                self.url = line.split(" ", 1)[1]
                break
        else:
            raise RuntimeError("thaw serve did not start")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # ready once every loadable model loaded
            index = requests.post(f"{self.url}/v2/repository/index", timeout=10).json()
            if all(row.get("state") in ("READY", "UNAVAILABLE") for row in index):
                return
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
