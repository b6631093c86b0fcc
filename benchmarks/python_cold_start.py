"""A Python model's cold start through `thaw up`, with the pool's stub started ahead and without,
measured in one run.

    python benchmarks/python_cold_start.py [--reps 7] [--work /tmp/thaw_python_cold_start]

Two `thaw up` processes over copies of one repository holding Triton's `add_sub` Python model
(benchmarks.workloads): one with `--python-spare-stubs 1` (the default: each warm-pool process
starts a stub while it waits to be claimed), one with `--python-spare-stubs 0` (the baseline:
the stub starts at the load, as before). Each rep scales the model to zero on both, waits for an
idle pool process, and times one request from zero on each (the order alternating), client side
and by `thaw up`'s own cold-start phases (`restore` is the model's load in the claimed process);
and what the spare costs: the PSS of the stubs under `thaw up` while the model is at zero.
Prints the medians, their ratio, and the machine line; other work on the machine moves the
absolute numbers, compare the two columns of one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from activator.scaler.local.process_memory import pss_bytes
from benchmarks.cold_start import Up, timed_post
from benchmarks.machine import machine_line
from benchmarks.workloads import add_sub_workload, write_add_sub

MODEL = "add_sub"
SIDES = {"started ahead (1)": "1", "at the load (0)": "0"}


def stubs_pss_mib(up: Up) -> float:
    """The PSS of every Python stub under `thaw up` (with the model at zero: the spares)."""
    total = 0
    for proc in psutil.Process(up.proc.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "runtime.python.stub.stub_main" in proc.cmdline():
                total += pss_bytes(proc.pid) or 0
    return total / (1 << 20)


def one_cold_start(up: Up, body: bytes) -> dict[str, float]:
    up.cold_and_pool_ready(MODEL)
    time.sleep(0.5)  # the new pool process's spare has imported (it took ~0.3 s at most here)
    pss_mib = stubs_pss_mib(up)
    before = up.phase_sums(MODEL)
    client_s = timed_post(up.url, MODEL, body, {"Content-Type": "application/json"})
    up.wait(lambda: up.phase_sums(MODEL)["total"] > before["total"], 30, "the cold start's metrics")
    after = up.phase_sums(MODEL)
    restore_s = after["restore"] - before["restore"]
    return {"client_s": client_s, "restore_s": restore_s, "spare_pss_mib": pss_mib}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--work", type=Path, default=Path("/tmp/thaw_python_cold_start"))
    parser.add_argument("--json", type=Path, default=None, help="write raw results here")
    args = parser.parse_args(argv)
    shutil.rmtree(args.work, ignore_errors=True)
    body = add_sub_workload().payload.body
    ups: dict[str, Up] = {}
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    load_start = os.getloadavg()[0]
    try:
        for side, spares in SIDES.items():
            base = args.work / f"spares-{spares}"
            write_add_sub(base / "repo")
            ups[side] = Up(
                base / "repo", base / "cache", base / "up.log", images=False,
                extra=("--python-spare-stubs", spares, "--preload-frameworks", ""),
            )  # fmt: skip
        for up in ups.values():
            up.wait(up.ready, 120, "thaw up ready")
        for rep in range(args.reps):
            order = list(SIDES) if rep % 2 == 0 else list(reversed(SIDES))
            for side in order:
                runs[side].append(one_cold_start(ups[side], body))
    finally:
        for up in ups.values():
            up.stop()
    print(f"{MODEL} (a Python model in its stub) from zero through `thaw up`, {args.reps} reps")
    print(
        "| pool's Python stub | first request, client (median, min-max) | restore phase "
        "| stubs' PSS at zero (the spares) |"
    )
    print("|---|---:|---:|---:|")
    medians = {}
    for side, rows in runs.items():
        client = sorted(r["client_s"] * 1e3 for r in rows)
        restore = sorted(r["restore_s"] * 1e3 for r in rows)
        medians[side] = (statistics.median(client), statistics.median(restore))
        pss = statistics.median(r["spare_pss_mib"] for r in rows)
        print(
            f"| {side} | {medians[side][0]:.0f} ms ({client[0]:.0f}-{client[-1]:.0f}) "
            f"| {medians[side][1]:.0f} ms | {pss:.0f} MiB |"
        )
    ahead, baseline = (medians[side] for side in SIDES)
    print(
        f"ratio, at the load / started ahead: first request {baseline[0] / ahead[0]:.1f}x, "
        f"restore {baseline[1] / ahead[1]:.1f}x"
    )
    print(machine_line(load_start, os.getloadavg()[0]))
    if args.json is not None:
        args.json.write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
