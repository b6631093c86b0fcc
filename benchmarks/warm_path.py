"""Warm-path cost of `thaw up`: straight to a replica vs through the activator vs handed off.

One `thaw up` serves two copies of a tiny ONNX model: `tiny` with direct connections (the
default: a warm model's new client connections are handed to a replica) and `tiny_inpath`
with `thaw.direct_connections` "false" (every request proxied by the activator). Three sides
are measured in interleaved rounds, each starting with the next side (so background load
spreads evenly): straight to `tiny`'s
replica, through the activator in-path, and through the activator's front door with direct
connections. Each side: p50 of 500 sequential requests on one connection, then throughput of
16 concurrent clients for --seconds, and the CPU per request of `thaw up`'s whole process tree
(activator, fork server, replicas: user+sys from psutil) over that 16-client run — the
steadier measure on a shared machine. Medians over --rounds.

    .venv/bin/python -m benchmarks.warm_path [--rounds 3] [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.cold_start import Model, Up, _latency_and_throughput, timed_infer
from benchmarks.machine import machine_line
from benchmarks.proc_cpu import tree_cpu_s

SIDES = ("replica", "in_path", "direct")


def prepare_repo(work: Path) -> Path:
    from tests.fixtures.onnx_models import make_identity_fp32

    repo = work / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    make_identity_fp32(repo, "tiny")
    inpath = make_identity_fp32(repo, "tiny_inpath")
    config = inpath / "config.pbtxt"
    config.write_text(
        config.read_text()
        + '\nparameters { key: "thaw.direct_connections" value { string_value: "false" } }\n'
    )
    return repo


def measure(work: Path, rounds: int, seconds: float) -> dict[str, Any]:
    repo = prepare_repo(work)
    up = Up(repo, work / "cache", work / "thaw-up.log", images=False)
    loadavg = [os.getloadavg()[0]]
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    try:
        tiny = Model("tiny", "model.onnx", "INPUT0", (1, 16), "onnxruntime")
        inpath = Model("tiny_inpath", "model.onnx", "INPUT0", (1, 16), "onnxruntime")
        timed_infer(up.url, tiny)  # wake both
        timed_infer(up.url, inpath)
        replica = up.model("tiny")["replicas"][0]["url"]
        targets = {
            "replica": (replica, tiny),
            "in_path": (up.url, inpath),
            "direct": (up.url, tiny),
        }
        for r in range(rounds):
            # Each round starts with the next side, so no side always runs first or last.
            for side in SIDES[r % len(SIDES) :] + SIDES[: r % len(SIDES)]:
                url, model = targets[side]
                cpu = partial(tree_cpu_s, up.proc.pid)
                runs[side].append(asyncio.run(_latency_and_throughput(url, model, seconds, cpu)))
        handed_off = _handoffs(up)
    finally:
        up.stop()
    loadavg.append(os.getloadavg()[0])
    medians = {
        side: {key: statistics.median(r[key] for r in rs) for key in ("p50_ms", "rps", "cpu_us")}
        for side, rs in runs.items()
    }
    return {"sides": medians, "runs": runs, "loadavg": loadavg, "handoffs": handed_off}


def _handoffs(up: Up) -> dict[str, float]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(up.url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "thaw_handoffs_total" and sample.labels["model"] == "tiny":
                counts[sample.labels["result"]] = sample.value
    return counts


def report(results: dict[str, Any]) -> str:
    s = results["sides"]
    base = s["replica"]
    lines = [
        "| side | p50 latency | throughput (16 clients) | vs straight | CPU µs/request "
        "(thaw up's tree) | straight's CPU / this side's |",
        "|---|---|---|---|---|---|",
    ]
    labels = {
        "replica": "straight to the replica",
        "in_path": "through the activator (direct connections off)",
        "direct": "through the activator (direct connections on)",
    }
    for side in SIDES:
        r = s[side]
        lines.append(
            f"| {labels[side]} | {r['p50_ms']:.2f} ms | {r['rps']:.0f} req/s | "
            f"{100 * r['rps'] / base['rps']:.0f}% | {r['cpu_us']:.0f} | "
            f"{100 * base['cpu_us'] / r['cpu_us']:.0f}% |"
        )
    runs = results["runs"]
    for side in ("in_path", "direct"):
        ratios = [
            f"{100 * r['rps'] / b['rps']:.0f}% ({r['cpu_us']:.0f} vs {b['cpu_us']:.0f} µs)"
            for r, b in zip(runs[side], runs["replica"], strict=True)
        ]
        lines.append(
            f"\n{labels[side]}, each round vs the replica (throughput, CPU µs/request): "
            + ", ".join(ratios)
        )
    start, end = results["loadavg"]
    lines.append(
        f"\nconnections of `tiny` at the front door: {results['handoffs']}\n"
        + machine_line(start, end)
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/thaw_warm_path"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="throughput run length")
    args = parser.parse_args(argv)
    print(report(measure(args.work, args.rounds, args.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
