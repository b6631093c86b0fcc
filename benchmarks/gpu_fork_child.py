"""The proof that a fork-server child serves on the GPU: `thaw up --target auto` started, asked
once, and a process its fork server forked found among NVML's processes on a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.gpu_row import Row
from benchmarks.gpu_torch_model import torch_linear_model
from benchmarks.listening import announced_url


def fork_child_rows(root: Path, work: Path) -> list[Row]:
    """`thaw up --target auto`: a pool process forked by the fork server serves a KIND_AUTO
    model on the GPU (NVML lists that child among the GPU's processes)."""
    import psutil
    import pynvml

    repo = work / "up-models"
    torch_linear_model(repo, "auto_up", groups="")
    argv = [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0", "--target", "auto"]
    argv += ["--warm-pool", "1", "--fork-server", "on", "--preload-frameworks", "torch"]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, env=env, cwd=root)
        try:
            return _forked_on_gpu(proc, psutil, pynvml)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _forked_on_gpu(proc: subprocess.Popen[bytes], psutil: Any, pynvml: Any) -> list[Row]:
    """The answer of one inference through `thaw up`, and whether a process the fork server
    forked is among the processes NVML sees on a GPU."""
    url = announced_url(proc, 90, "thaw up")
    _until(lambda: _status(url + "/v2/health/ready") == 200, 120)
    x = np.random.default_rng(12).standard_normal(256).astype(np.float32).tolist()
    tensor = {"name": "INPUT__0", "shape": [1, 256], "datatype": "FP32", "data": x}
    body = {"inputs": [tensor]}
    start = time.perf_counter()
    request = urllib.request.Request(
        url + "/v2/models/auto_up/infer", json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=120) as response:
        answer = json.loads(response.read())
    seconds = time.perf_counter() - start
    children = psutil.Process(proc.pid).children(recursive=True)
    zygotes = [c for c in children if "--fork-server-fd" in " ".join(c.cmdline())]
    forked = {c.pid for z in zygotes for c in z.children()}
    pynvml.nvmlInit()
    on_gpu = set()
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        on_gpu |= {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    ok = bool(forked & on_gpu) and bool(answer.get("outputs"))
    return [
        Row(
            "fork-server child on the GPU (thaw up --target auto, KIND_AUTO model)",
            f"wake + 1st inference {seconds:.2f} s; forked pids {sorted(forked)}, on the "
            f"GPU per NVML {sorted(on_gpu)}",
            "no CUDA in the fork server, CUDA in its child",
            "ok" if ok else "NO FORKED CHILD ON THE GPU",
            ok=ok,
        )
    ]


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except OSError:
        return 0


def _until(predicate: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise RuntimeError(f"not ready within {timeout_s:.0f} s")
