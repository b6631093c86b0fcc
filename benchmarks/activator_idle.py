"""What an idle `thaw up` costs: the activator's CPU and RSS, and its pool's, with no traffic.

    python benchmarks/activator_idle.py [--repo model_repository] [--seconds 30] [--json OUT]

A `thaw up` with its defaults (fork server, demand-sized pool, host-memory tier) over the
example repository, started, images built, every model woken once and scaled back to zero
(so the pool has grown to the demand and the tier holds images), then left alone: over
--seconds, the activator process's CPU time (user + system, as a percentage of one core) and
its RSS at the end; the same for the fork server and each idle pool process. Baseline, same
run: the same sequence through a `thaw up` configured as before this work (one spawned pool
process, no host tier). Goal: the activator < 1% CPU and < 100 MB RSS at idle.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from benchmarks.cold_start import Up, timed_infer  # noqa: E402
from benchmarks.machine import machine_line  # noqa: E402
from benchmarks.multi_model_wake import EXAMPLE, prepare, settle  # noqa: E402

MiB = 2**20


def idle_costs(up: Up, seconds: float) -> dict[str, Any]:
    """CPU % of one core over `seconds` and RSS, of the activator and its descendants."""
    activator = psutil.Process(up.proc.pid)
    processes = {"activator": activator}
    for child in activator.children(recursive=True):
        # A forked pool process shows its fork server's command line (fork without exec).
        server = child.ppid() == activator.pid and "--fork-server-fd" in child.cmdline()
        processes[f"{'fork server' if server else 'pool process'} {child.pid}"] = child
    before = {name: p.cpu_times() for name, p in processes.items()}
    time.sleep(seconds)
    costs = {}
    for name, p in processes.items():
        try:
            after = p.cpu_times()
            rss = p.memory_info().rss
        except psutil.NoSuchProcess:
            continue
        used = (after.user + after.system) - (before[name].user + before[name].system)
        costs[name] = {"cpu_percent": 100 * used / seconds, "rss_bytes": rss}
    return costs


def run(repo: Path, work: Path, seconds: float, extra: tuple[str, ...], tag: str) -> dict[str, Any]:
    cache = work / f"cache_idle_{tag}"
    shutil.rmtree(cache, ignore_errors=True)
    up = Up(repo, cache, work / f"thaw-up-idle-{tag}.log", extra=extra)
    try:
        up.wait(up.ready, 300, "ready")
        up.wait(up.images_settled, 900, "image builds")
        for model in EXAMPLE:
            timed_infer(up.url, model)
        settle(up, [m.name for m in EXAMPLE])
        time.sleep(5.0)  # the host tier's background copies are done
        return idle_costs(up, seconds)
    finally:
        up.stop()


def report(results: dict[str, Any]) -> str:
    lines = [
        "| configuration | process | CPU at idle (% of one core) | RSS |",
        "|---|---|---|---|",
    ]
    for tag, costs in results["runs"].items():
        for name, c in costs.items():
            lines.append(
                f"| {tag} | {name} | {c['cpu_percent']:.2f}% | {c['rss_bytes'] / MiB:.0f} MiB |"
            )
    a = results["runs"]["defaults"]["activator"]
    ok = "met" if a["cpu_percent"] < 1 and a["rss_bytes"] < 100 * 10**6 else "not met"
    lines.append(
        f"\nactivator at idle: {a['cpu_percent']:.2f}% CPU, {a['rss_bytes'] / MiB:.0f} MiB RSS "
        f"(goal < 1% and < 100 MB: {ok}); sampled over {results['seconds']:g} s"
    )
    lines.append(machine_line(*results["load"][:2]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT / "model_repository")
    parser.add_argument("--work", type=Path, default=Path("/tmp/thaw_activator_idle"))
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    repo, _ = prepare(args.repo, args.work, 3)
    results: dict[str, Any] = {"runs": {}, "seconds": args.seconds, "load": [os.getloadavg()[0]]}
    results["runs"]["defaults"] = run(repo, args.work, args.seconds, (), "defaults")
    before = ("--fork-server", "off", "--pool-window-s", "0", "--host-cache-bytes", "0")
    results["runs"]["as before (baseline)"] = run(repo, args.work, args.seconds, before, "old")
    results["load"].append(os.getloadavg()[0])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
