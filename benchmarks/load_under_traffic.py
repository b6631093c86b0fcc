"""How long a repository `load` that replaces a model's replica takes through `thaw up` while a
client is busy on a connection handed to that replica, next to the same load with no traffic,
in the same run.

A load whose files changed drains the old replica before it answers. A client in a closed loop
on a direct connection (the warm path) kept that drain busy until the connection's max age
(`--direct-max-age-s`, 10 s by default), so the load took up to that long; since stop 63 the
drained replica ends each connection at its next answer (the handoff protocol's DRAIN message)
and the load takes about what it takes idle.

    .venv/bin/python -m benchmarks.load_under_traffic [--rounds 5] [--max-age-s 10]

Each round: a load with no traffic (the baseline), then a load beside one busy direct client
(add_sub, Triton's python_backend example, in its stub), each after a change of its config
beyond `instance_group` (a replica replaced), interleaved. Prints the median seconds of each,
their ratio, and the busy client's answers and errors over the run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

from benchmarks.cold_start import Up
from benchmarks.machine import machine_line
from benchmarks.workloads import ADD_SUB_ELEMENTS, write_add_sub

__all__ = ["main", "summary"]

_BODY = json.dumps(
    {
        "inputs": [
            {"name": n, "datatype": "FP32", "shape": [ADD_SUB_ELEMENTS], "data": [1.0] * 16}
            for n in ("INPUT0", "INPUT1")
        ]
    }
).encode()


class _Busy:
    """One client in a closed loop on its own keep-alive connection (http.client reconnects
    after `Connection: close`); counts its answers and errors."""

    def __init__(self, hostport: str) -> None:
        self._conn = http.client.HTTPConnection(hostport, timeout=60)
        self.answers = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._conn.request("POST", "/v2/models/add_sub/infer", _BODY)
                response = self._conn.getresponse()
                response.read()
                if response.status == 200:
                    self.answers += 1
                else:
                    self.errors.append(f"HTTP {response.status}")
            except (OSError, http.client.HTTPException) as exc:
                self.errors.append(repr(exc))
                self._conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self._conn.close()


def _change(repo: Path, serial: int) -> None:
    """add_sub's config changed beyond instance_group (a parameter): its replica is replaced."""
    path = repo / "add_sub" / "config.pbtxt"
    before = path.stat().st_mtime_ns
    text = path.read_text().split("parameters", 1)[0]
    path.write_text(text + f'parameters {{ key: "serial" value {{ string_value: "{serial}" }} }}\n')
    os.utime(path, ns=(before + 10**9, before + 10**9))


def _timed_load(up: Up) -> float:
    started = time.perf_counter()
    up.post("/v2/repository/models/add_sub/load")
    return time.perf_counter() - started


def summary(idle_s: list[float], busy_s: list[float]) -> dict[str, float]:
    """Medians of the idle and busy loads and their ratio (busy over idle)."""
    idle, busy = statistics.median(idle_s), statistics.median(busy_s)
    return {"idle_s": idle, "busy_s": busy, "ratio": busy / idle}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-age-s", type=float, default=10.0, help="--direct-max-age-s")
    parser.add_argument("--work", type=Path, default=Path("/tmp/thaw_load_under_traffic"))
    args = parser.parse_args(argv)
    shutil.rmtree(args.work, ignore_errors=True)
    repo = args.work / "repo"
    repo.mkdir(parents=True)
    write_add_sub(repo)
    up = Up(repo, args.work / "cache", args.work / "thaw-up.log", images=False,
            extra=("--direct-max-age-s", str(args.max_age_s)))  # fmt: skip
    idle_s: list[float] = []
    busy_s: list[float] = []
    answers, errors = 0, list[str]()
    load_start = os.getloadavg()[0]
    try:
        up.wait(up.ready, 120, "thaw up ready")
        up.post("/v2/repository/models/add_sub/load")
        for round_ in range(args.rounds):
            _change(repo, 2 * round_)
            idle_s.append(_timed_load(up))
            busy = _Busy(up.url.removeprefix("http://"))
            up.wait(lambda: up.model("add_sub")["direct_connections"] >= 1, 60, "a handoff")
            time.sleep(0.5)  # the client in its loop
            _change(repo, 2 * round_ + 1)
            busy_s.append(_timed_load(up))
            busy.stop()
            answers, errors = answers + busy.answers, errors + busy.errors
    finally:
        up.stop()
    result = summary(idle_s, busy_s)
    print(machine_line(load_start, os.getloadavg()[0]))
    print(f"load replacing add_sub's replica, {args.rounds} rounds, --direct-max-age-s "
          f"{args.max_age_s:g}")  # fmt: skip
    print("| load | median s | rounds (s) |")
    print("|---|---:|---|")
    print(f"| no traffic (baseline) | {result['idle_s']:.2f} | "
          + ", ".join(f"{s:.2f}" for s in idle_s) + " |")  # fmt: skip
    print(f"| beside a busy direct client | {result['busy_s']:.2f} | "
          + ", ".join(f"{s:.2f}" for s in busy_s) + " |")  # fmt: skip
    print(f"ratio busy / baseline: {result['ratio']:.2f}x; the busy client: {answers} answers, "
          f"{len(errors)} errors {errors[:3]}")  # fmt: skip
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
