"""A Python model's cold start through `thaw up`, with the pool's stub started ahead and without,
measured in one run.

    python benchmarks/python_cold_start.py [--reps 7] [--model-imports torch] [--instances 2]

Two `thaw up` processes over copies of one repository holding Triton's `add_sub` Python model
(benchmarks.workloads): one with `--python-spare-stubs 1` (the default: each warm-pool process
starts a stub while it waits to be claimed), one with `--python-spare-stubs 0` (the baseline:
the stub starts at the load, as before). `--model-imports torch`: the model imports torch first;
the sides are then `thaw up`'s defaults (its spare imports torch, read from the model's
imports), `--python-spare-stubs 0`, and a spare told to import nothing
(`--python-spare-stub-imports ''`: the default before stop 67). `--instances N`: the model runs
N instances; the sides are the default (N spares), `--python-spare-stubs 0` and
`--python-spare-stubs 1` (stop 66's default: all but one instance's stub started at the load).
Each rep scales the model to zero on each, waits for an idle pool process and `--settle-s`, and
times one request from zero on each (the order alternating), client side and by `thaw up`'s own
cold-start phases
(`restore` is the model's load in the claimed process); and what the spare costs: the PSS of
the stubs under `thaw up` while the model is at zero. Prints the medians, their ratios to the
baseline, and the machine line; other work on the machine moves the absolute numbers, compare
the columns of one run.
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
AHEAD, AT_LOAD = "started ahead (1)", "at the load (0)"


def stubs_pss_mib(up: Up) -> float:
    """The PSS of every Python stub under `thaw up` (with the model at zero: the spares)."""
    total = 0
    for proc in psutil.Process(up.proc.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "runtime.python.stub.stub_main" in proc.cmdline():
                total += pss_bytes(proc.pid) or 0
    return total / (1 << 20)


def sides(module: str | None, instances: int = 1) -> dict[str, tuple[str, ...]]:
    """Each side's `thaw up` flags: the default, the baseline, and with the model importing
    `module`, a spare told to import nothing (the default before its imports were read); with
    several instances, one spare (the default before it followed the instance count)."""
    if instances > 1:
        return {
            f"thaw up's default ({instances} spares)": (),
            AT_LOAD: ("--python-spare-stubs", "0"),
            "one spare (stop 66's default)": ("--python-spare-stubs", "1"),
        }
    if not module:
        return {AHEAD: ("--python-spare-stubs", "1"), AT_LOAD: ("--python-spare-stubs", "0")}
    return {
        f"thaw up's default (a spare importing {module}, read from model.py)": (),
        AT_LOAD: ("--python-spare-stubs", "0"),
        "started ahead (1), importing nothing": ("--python-spare-stub-imports", ""),
    }


def one_cold_start(up: Up, body: bytes, settle_s: float) -> dict[str, float]:
    up.cold_and_pool_ready(MODEL)
    time.sleep(settle_s)  # the new pool process's spare has done its imports
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
    parser.add_argument(
        "--model-imports", default=None, metavar="MODULE",
        help="the model imports MODULE first (e.g. torch); adds a side whose spare imports nothing",
    )  # fmt: skip
    parser.add_argument(
        "--instances", type=int, default=1, metavar="N",
        help="the model's instance count (default 1); above 1 the sides are the default "
        "(N spares), none, and one spare",
    )  # fmt: skip
    parser.add_argument(
        "--settle-s", type=float, default=None,
        help="wait after the pool process is ready (default 0.5 s; 8 s with --model-imports)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    settle_s = args.settle_s if args.settle_s is not None else (8.0 if args.model_imports else 0.5)
    shutil.rmtree(args.work, ignore_errors=True)
    body = add_sub_workload().payload.body
    flags = sides(args.model_imports, args.instances)
    ups: dict[str, Up] = {}
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in flags}
    load_start = os.getloadavg()[0]
    try:
        for number, (side, extra) in enumerate(flags.items()):
            base = args.work / f"side-{number}"
            write_add_sub(base / "repo")
            if args.model_imports:
                model_py = base / "repo" / MODEL / "1" / "model.py"
                model_py.write_text(f"import {args.model_imports}\n{model_py.read_text()}")
            if args.instances > 1:
                config = base / "repo" / MODEL / "config.pbtxt"
                count = f"count: {args.instances} kind"
                config.write_text(config.read_text().replace("count: 1 kind", count))
            ups[side] = Up(
                base / "repo", base / "cache", base / "up.log", images=False,
                extra=(*extra, "--preload-frameworks", ""),
            )  # fmt: skip
        for up in ups.values():
            up.wait(up.ready, 120, "thaw up ready")
        for rep in range(args.reps):
            order = list(flags) if rep % 2 == 0 else list(reversed(flags))
            for side in order:
                runs[side].append(one_cold_start(ups[side], body, settle_s))
    finally:
        for up in ups.values():
            up.stop()
    imports = f", its model.py importing {args.model_imports}" if args.model_imports else ""
    imports += f", {args.instances} instances" if args.instances > 1 else ""
    print(
        f"{MODEL} (a Python model in its stub{imports}) from zero via `thaw up`, {args.reps} reps"
    )
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
    baseline = medians[AT_LOAD]
    for side in flags:
        if side != AT_LOAD:
            ours = medians[side]
            print(
                f"ratio, at the load / {side}: first request {baseline[0] / ours[0]:.1f}x, "
                f"restore {baseline[1] / ours[1]:.1f}x"
            )
    print(machine_line(load_start, os.getloadavg()[0]))
    if args.json is not None:
        args.json.write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
