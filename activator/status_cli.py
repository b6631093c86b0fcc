"""`thaw status`: a table of every model behind a running `thaw up`.

It reads `GET /thaw/status` and parses it with the same `StatusDocument` the activator
serves (activator.status_document), so the two ends cannot disagree on its shape.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request

from activator.scaler.backend import PoolStatus
from activator.status_document import StatusDocument

__all__ = ["format_table", "register", "run"]

_COLUMNS = (
    "MODEL",
    "STATE",
    "READY/DESIRED",
    "HELD",
    "IN FLIGHT",
    "LAST COLD START",
    "DIRECT",  # client connections handed to the model's replicas
    "IMAGE",  # its snapshot image: built, cached, building, not in store, ...
    "ERROR",
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "status",
        help="show every model behind a running `thaw up`",
        description="Print model, state (cold/waking/warm/draining), replicas ready/desired, "
        "held requests and the last cold start of a running `thaw up`.",
    )
    p.add_argument("--url", default="http://127.0.0.1:8000", help="where `thaw up` listens")
    p.add_argument("--json", action="store_true", help="print the raw JSON")
    p.add_argument("--timeout-s", type=float, default=5.0, help="give up after this long")
    p.set_defaults(func=run)


def format_table(status: StatusDocument) -> str:
    rows = [_COLUMNS]
    for m in status.models:
        cold = m.last_cold_start_s
        rows.append(
            (
                m.model,
                m.state.value,
                f"{m.replicas_ready}/{m.replicas_desired}",
                str(m.held_requests),
                str(m.in_flight),
                "-" if cold is None else f"{cold:.3f} s",
                str(m.direct_connections),
                status.image_builds.get(m.model, "-")[:40],
                (m.last_error or "")[:60],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines += _pool_lines(status.warm_pool)
    return "\n".join(lines)


def _pool_lines(pool: PoolStatus) -> list[str]:
    """The warm pool: ready/target, where processes come from, their memory."""
    head = f"warm pool: {pool.ready}/{pool.size} ready"
    if pool.starting:
        head += f", {pool.starting} starting"
    details = [d for d in (pool.source, pool.limit and f"size set by {pool.limit}") if d]
    if pool.demand:
        details.append(f"{pool.demand} models woke recently")
    if pool.last_start_s is not None:
        details.append(f"last start -> ready {pool.last_start_s:.3f} s")
    lines = [head + (f" ({'; '.join(details)})" if details else "")]
    if pool.idle_pss_bytes or pool.server_pss_bytes:
        each = ", ".join(_mib(b) for b in pool.idle_pss_bytes) or "-"
        memory = f"  memory (PSS): idle processes {each}"
        if pool.server_pss_bytes:
            memory += f"; fork server {_mib(pool.server_pss_bytes)}"
        if pool.budget_bytes is not None:
            memory += f"; budget {_mib(pool.budget_bytes)}"
        lines.append(memory)
    return lines


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.0f} MiB"


def run(args: argparse.Namespace) -> int:
    url = args.url.rstrip("/") + "/thaw/status"
    try:
        with urllib.request.urlopen(url, timeout=args.timeout_s) as resp:
            raw = json.loads(resp.read())
        try:
            status = StatusDocument.from_json(raw)
        except ValueError as exc:
            raise ValueError(f"the answer is not a `thaw up` status document ({exc})") from None
    except urllib.error.HTTPError as exc:
        print(
            f"thaw status: cannot read {url}: HTTP {exc.code} (not a `thaw up`?)", file=sys.stderr
        )
        return 1
    except urllib.error.URLError as exc:
        print(
            f"thaw status: cannot read {url}: {exc.reason} (is `thaw up` running there?)",
            file=sys.stderr,
        )
        return 1
    except (OSError, ValueError) as exc:
        print(f"thaw status: cannot read {url}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(raw, indent=2) if args.json else format_table(status))
    return 0
