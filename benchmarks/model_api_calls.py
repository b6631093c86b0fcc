"""What a Python model's `pb_utils.is_model_ready` costs through `thaw up`, where it asks the
platform's front door (since stop 64: a model loaded by a model is the platform's), next to
the same call under `thaw serve`, where the server answers it itself, in the same run.

    .venv/bin/python -m benchmarks.model_api_calls [--rounds 5] [--calls 200]

One model, `asker` (in its stub process, the default), times `--calls` calls of
`is_model_ready` inside one `execute` and answers the mean in microseconds. Each round asks
it once on `thaw serve` (the baseline) and once through `thaw up`, interleaved. Prints the
median of each, every round's value, and the ratio (through `thaw up` over `thaw serve`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import urllib.request
from pathlib import Path

from benchmarks.cold_start import ROOT, Up
from benchmarks.listening import announced_url
from benchmarks.machine import machine_line

__all__ = ["main", "summary"]

_ASKER_PY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            calls = int(pb_utils.get_input_tensor_by_name(request, "CALLS").as_numpy()[0])
            started = time.perf_counter()
            for _ in range(calls):
                if not pb_utils.is_model_ready("asker"):
                    raise pb_utils.TritonModelException("asker is not ready to itself")
            mean_us = (time.perf_counter() - started) / calls * 1e6
            out = pb_utils.Tensor("MEAN_US", np.array([mean_us], dtype=np.float64))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""
_ASKER_CONFIG = """name: "asker"
backend: "python"
input [ { name: "CALLS" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "MEAN_US" data_type: TYPE_FP64 dims: [ 1 ] } ]
"""


def write_asker(repo: Path) -> None:
    (repo / "asker" / "1").mkdir(parents=True)
    (repo / "asker" / "config.pbtxt").write_text(_ASKER_CONFIG)
    (repo / "asker" / "1" / "model.py").write_text(_ASKER_PY)


def ask(url: str, calls: int) -> float:
    """The mean microseconds of one `is_model_ready` call, as the model measured `calls`."""
    body = json.dumps(
        {"inputs": [{"name": "CALLS", "datatype": "INT32", "shape": [1], "data": [calls]}]}
    ).encode()
    request = urllib.request.Request(f"{url}/v2/models/asker/infer", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=300) as response:
        return float(json.loads(response.read())["outputs"][0]["data"][0])


def summary(serve_us: list[float], up_us: list[float]) -> dict[str, float]:
    """Medians of the two and their ratio (through `thaw up` over `thaw serve`)."""
    serve, up = statistics.median(serve_us), statistics.median(up_us)
    return {"serve_us": serve, "up_us": up, "ratio": up / serve}


def _serve(repo: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    argv = [sys.executable, "-m", "thaw.cli", "serve", "--model-repository", str(repo),
            "--http-port", "0", "--allow-grpc", "false", "--allow-metrics", "false",
            "--model-control-mode", "explicit", "--load-model", "asker"]  # fmt: skip
    with log.open("wb") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, cwd=ROOT)
    try:
        return proc, announced_url(proc, 120, "thaw serve")
    except RuntimeError:
        proc.kill()
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="is_model_ready calls a round")
    parser.add_argument("--work", type=Path, default=Path("/tmp/thaw_model_api_calls"))
    args = parser.parse_args(argv)
    shutil.rmtree(args.work, ignore_errors=True)
    repo = args.work / "repo"
    repo.mkdir(parents=True)
    write_asker(repo)
    load_start = os.getloadavg()[0]
    serve, serve_url = _serve(repo, args.work / "thaw-serve.log")
    up = Up(repo, args.work / "cache", args.work / "thaw-up.log", images=False)
    serve_us: list[float] = []
    up_us: list[float] = []
    try:
        up.wait(up.ready, 120, "thaw up ready")
        ask(serve_url, args.calls)  # each warm: the model loaded, its stub started
        ask(up.url, args.calls)
        for _ in range(args.rounds):
            serve_us.append(ask(serve_url, args.calls))
            up_us.append(ask(up.url, args.calls))
    finally:
        up.stop()
        serve.terminate()
        serve.wait(60)
    result = summary(serve_us, up_us)
    print(machine_line(load_start, os.getloadavg()[0]))
    print(f"pb_utils.is_model_ready from a stub process, {args.calls} calls a round, "
          f"{args.rounds} rounds")  # fmt: skip
    print("| where | median µs per call | rounds (µs) |")
    print("|---|---:|---|")
    for label, key, values in (("thaw serve (baseline: the server answers)", "serve_us",
                                serve_us), ("through thaw up (the front door answers)",
                                            "up_us", up_us)):  # fmt: skip
        print(f"| {label} | {result[key]:.0f} | " + ", ".join(f"{v:.0f}" for v in values) + " |")
    print(f"ratio thaw up / thaw serve: {result['ratio']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
