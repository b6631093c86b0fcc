"""The first request after `thaw up` starts, with pre-built images in a store, next to the same
model's isolated cold start measured in the same run.

    python benchmarks/first_request.py [--repo model_repository] [--work /tmp/thaw_first_request]
                                       [--big-gib 1.0] [--reps 3] [--json OUT]

The production path: images are built once (`thaw snapshot build MODEL --store STORE`, what CI
does before `push`), then each run starts a fresh `thaw up --store STORE` with an empty node
cache, as a new machine would. For each model (resnet50 ONNX; a TorchScript MLP of --big-gib
GiB) and each of --reps runs, request sent -> response received:

- after the pulls: the first request, sent once `thaw status` shows every image pulled into
  the cache (a few seconds after start-up: what a node that has been up a moment sees);
- at ready: the first request, sent once `/v2/health/ready` answers 200 (the warm pool has
  its first process); the start-up pull of its image may still be running;
- at listening: the first request, sent the moment `thaw up` printed THAW_LISTENING (the pool
  is still importing the frameworks);
- isolated (baseline, same run): the same model woken alone after scale to zero, the pool
  settled (median of --reps, in the last run's `thaw up`).

Also in the same run, for context: the first request at listening without a store (images
build in the background, so it is a normal load, the issue's 7.96 s case) and a naive fresh
process (start Python, import the framework, load the file, infer). Goal: <= 1.5x isolated.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.cold_start import (  # noqa: E402
    Model,
    Up,
    naive_cold_start,
    prepare_repo,
    thaw_cold_starts,
    timed_infer,
)
from benchmarks.machine import machine_line  # noqa: E402


def build_store(repo: Path, models: list[Model], store: Path) -> None:
    """`thaw snapshot build` of every model into a directory store (once per --work)."""
    for model in models:
        if (store / "images" / model.name).is_dir():
            continue
        argv = [sys.executable, "-m", "thaw.cli", "snapshot", "build", str(repo / model.name),
                "--store", str(store)]  # fmt: skip
        subprocess.run(argv, check=True, capture_output=True)


def one_run(
    repo: Path,
    work: Path,
    model: Model,
    *,
    store: Path | None,
    wait_ready: bool,
    tag: str,
    wait_pulls: bool = False,
) -> tuple[float, Up]:
    """A fresh `thaw up` (empty cache); seconds of its first request for `model`."""
    cache = work / f"cache_{tag}"
    shutil.rmtree(cache, ignore_errors=True)
    extra = ("--store", str(store)) if store is not None else ()
    up = Up(repo, cache, work / f"thaw-up-{tag}.log", extra=extra)
    if wait_ready:
        up.wait(up.ready, 300, "thaw up ready")
    if wait_pulls:
        up.wait(up.images_settled, 600, "the start-up pulls")
        time.sleep(1.0)
    return timed_infer(up.url, model), up


def measure(args: argparse.Namespace) -> dict[str, Any]:
    work = args.work
    repo, models = prepare_repo(args.repo, work, args.big_gib)
    store = work / "store"
    build_store(repo, models, store)
    results: dict[str, Any] = {"models": {}, "load": [os.getloadavg()[0]]}
    for model in models:
        row: dict[str, Any] = {
            "at_ready": [], "at_listening": [], "since_start_at_ready": [], "after_pulls": []
        }  # fmt: skip
        for rep in range(args.reps):
            seconds, up = one_run(repo, work, model, store=store, wait_ready=True,
                                  wait_pulls=True, tag=f"{model.name}_p{rep}")  # fmt: skip
            up.stop()
            row["after_pulls"].append(seconds)
            seconds, up = one_run(repo, work, model, store=store,
                                  wait_ready=False, tag=f"{model.name}_l{rep}")  # fmt: skip
            up.stop()
            row["at_listening"].append(seconds)
            started = time.perf_counter()
            seconds, up = one_run(
                repo, work, model, store=store, wait_ready=True, tag=f"{model.name}_r{rep}"
            )
            row["since_start_at_ready"].append(time.perf_counter() - started)
            row["at_ready"].append(seconds)
            if rep < args.reps - 1:
                up.stop()
        try:  # the isolated baseline, in the last run's thaw up (images pulled by now)
            up.wait(up.images_settled, 600, "image pulls")
            row["image_states"] = up.get("/thaw/status")["image_builds"]
            row["isolated"] = [r["client_s"] for r in thaw_cold_starts(up, model, args.reps)]
        finally:
            up.stop()
        seconds, up = one_run(repo, work, model, store=None, wait_ready=False,
                              tag=f"{model.name}_nostore")  # fmt: skip
        up.stop()
        row["no_store_at_listening"] = seconds
        naive_cold_start(model, repo)  # page cache warm, as for the others
        row["naive"] = naive_cold_start(model, repo)
        results["models"][model.name] = row
    results["load"].append(os.getloadavg()[0])
    return results


def report(results: dict[str, Any]) -> str:
    lines = [
        "| model | isolated cold start (median) | first request once the start-up pulls are "
        "done (median, range) | ratio | goal <= 1.5x | at ready, racing the pull (median, range) "
        "| ratio | at listening | no store, at listening | naive fresh process |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results["models"].items():
        isolated = statistics.median(r["isolated"])
        pulled = statistics.median(r["after_pulls"])
        ready = statistics.median(r["at_ready"])
        listening = statistics.median(r["at_listening"])
        ok = "met" if pulled <= 1.5 * isolated else "not met"
        lines.append(
            f"| {name} | {isolated:.3f} s | {pulled:.3f} s ({min(r['after_pulls']):.3f}-"
            f"{max(r['after_pulls']):.3f}) | {pulled / isolated:.1f}x | {ok} | {ready:.3f} s "
            f"({min(r['at_ready']):.3f}-{max(r['at_ready']):.3f}) | {ready / isolated:.1f}x | "
            f"{listening:.3f} s | {r['no_store_at_listening']:.3f} s | {r['naive']:.3f} s |"
        )
    for name, r in results["models"].items():
        lines.append(
            f"\n{name}: thaw up start -> ready -> first response "
            f"{statistics.median(r['since_start_at_ready']):.2f} s (median); image states "
            f"{r.get('image_states')}"
        )
    lines.append("\n" + machine_line(*results["load"][:2]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT / "model_repository")
    parser.add_argument("--work", type=Path, default=Path("/tmp/thaw_first_request"))
    parser.add_argument("--big-gib", type=float, default=1.0, help="0 skips the big model")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    args.work.mkdir(parents=True, exist_ok=True)
    results = measure(args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
