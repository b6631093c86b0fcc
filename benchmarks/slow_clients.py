"""Slow-loris clients against `thaw up` and `thaw serve` (either front), with their connection
limits off and on, in one run: N connections each trickle a request head one byte a second and
never finish it, while a separate process sends a normal health request on a fresh connection
every 20 ms.

    .venv/bin/python benchmarks/slow_clients.py                       # 5,000 connections, ~2 min
    .venv/bin/python benchmarks/slow_clients.py --connections 1000 --servers serve
    .venv/bin/python benchmarks/slow_clients.py --connections 3000 --servers serve,serve-native

For each server and side it reports how many slow connections the server closed within its
head deadline (and within the whole hold), how many were still open at the end, the statuses
it answered them with, and the normal request's p50/p99/max latency meanwhile; of that max, the
slowest request in flight while the connections were being opened (`max_ms_opening`) and while
the server closed them, its deadline reached for all of them at about once (`closing_s`, from
its first close to its last; `max_ms_closing`: issue 26 keeps it under 100 ms). "off" runs with
`--head-timeout 0 --idle-timeout 0 --max-connections 0` (the behaviour before the limits);
"on" with the defaults except `--head-timeout`. The open-file limit of this process (and so
of the servers it starts) is raised to the hard limit first.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.models import make_add_sub  # noqa: E402
from tests.fixtures.serve_process import ServeProcess  # noqa: E402
from tests.fixtures.slow_clients import LatencyProbe, hold_slow_connections, percentile  # noqa: E402
from tests.fixtures.up_process import UpProcess  # noqa: E402
from thawserver.fd_limit import raise_fd_limit  # noqa: E402


def _start(kind: str, repo: Path, head_s: float, *, on: bool) -> UpProcess | ServeProcess:
    # One spelling on both servers (thawserver.limit_flags).
    args = (
        ["--head-timeout-s", f"{head_s:g}"]
        if on
        else ["--head-timeout-s", "0", "--idle-timeout-s", "0"]
    )
    if not on:
        args += ["--max-connections", "0"]
    if kind == "up":
        return UpProcess(repo, "--warm-pool", "0", "--no-image-build", "--log-level", "warning",
                         *args)  # fmt: skip
    front = ["--front", "native"] if kind == "serve-native" else []
    server = ServeProcess(repo, "--log-level", "warning", *front, *args)
    server.wait_ready()
    return server


def _measure(kind: str, repo: Path, count: int, head_s: float, hold_s: float, *, on: bool) -> dict:
    server = _start(kind, repo, head_s, on=on)
    try:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        with LatencyProbe(host, int(port), "/v2/health/live") as probe:
            result = asyncio.run(hold_slow_connections(host, int(port), count, hold_s=hold_s))
    finally:
        server.stop()
    lat = probe.latencies_ms
    return {
        "server": f"thaw {kind}",
        "limits": f"on (head {head_s:g} s)" if on else "off",
        "opened": result.opened,
        "failed_to_open": result.failed_to_open,
        "closed_in_deadline": result.closed_within(head_s + 1.0),
        "closed_in_hold": result.opened - result.still_open,
        "still_open": result.still_open,
        "last_close_s": max((t for t in result.closed_after_s if not math.isinf(t)), default=0),
        "statuses": ",".join(f"{k}x{v}" for k, v in sorted(result.statuses.items())) or "-",
        "probe_n": len(lat),
        "probe_errors": sum(v for k, v in probe.statuses.items() if k != "200"),
        "p50_ms": percentile(lat, 50),
        "p99_ms": percentile(lat, 99),
        "max_ms": max(lat, default=math.nan),
        # the slowest normal request while the connections were being opened, and while the
        # server closed them (its deadline reached for all at once: issue 26's "keep")
        "max_ms_opening": probe.worst_ms(0.0, result.opened_by),
        "max_ms_closing": (
            probe.worst_ms(*result.closes) if result.closes is not None else math.nan
        ),
        "closing_s": (result.closes[1] - result.closes[0]) if result.closes is not None else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument("--head-timeout-s", type=float, default=10.0)
    parser.add_argument("--hold-s", type=float, default=20.0, help="how long the clients wait")
    parser.add_argument(
        "--servers",
        default="up,serve",
        help="up, serve, serve-native (`thaw serve --front native`: `make native` first)",
    )
    args = parser.parse_args(argv)
    fd = raise_fd_limit()
    print(f"open-file limit {fd.soft_before} -> {fd.soft} (hard {fd.hard})")
    repo = Path(tempfile.mkdtemp(prefix="slow-clients-"))
    make_add_sub(repo)
    rows = []
    for kind in args.servers.split(","):
        for on in (False, True):
            row = _measure(kind, repo, args.connections, args.head_timeout_s, args.hold_s, on=on)
            rows.append(row)
            print(row, flush=True)
    cols = ["server", "limits", "opened", "failed_to_open", "closed_in_deadline",
            "closed_in_hold", "still_open", "last_close_s", "statuses", "probe_n",
            "probe_errors", "p50_ms", "p99_ms", "max_ms", "max_ms_opening", "closing_s",
            "max_ms_closing"]  # fmt: skip
    print(f"\n{args.connections} slow connections, one head byte a second, held {args.hold_s:g} s")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        cells = [f"{row[c]:.1f}" if isinstance(row[c], float) else str(row[c]) for c in cols]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
