"""`thaw status`: a table of every model behind a running `thaw up`, or of what they cost.

It reads `GET /thaw/status` and parses it with the same `StatusDocument` the activator
serves (activator.observe.status_document), so the two ends cannot disagree on its shape. `--cost`
prints the cost view instead (replica- and GPU-seconds used vs always-on at the observed
peak, activator.observe.cost), `--json` the raw document, and `--watch` redraws either every few
seconds until interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from activator.observe.cost import CostFigures, priced
from activator.observe.shared_report import SharedReport
from activator.observe.status_document import ModelStatus, StatusDocument
from activator.scaler.backend import PoolStatus
from thawserver.ranges import out_of_range

__all__ = ["format_cost", "format_table", "register", "run", "watch"]

_COLUMNS = (
    "MODEL",
    "STATE",
    "READY/DESIRED",
    "HELD",
    "IN FLIGHT",
    "LAST COLD START",
    "FIRST TOKEN COLD/WARM",  # OpenAI API: arrival -> first token, at zero / with a replica
    "DIRECT",  # client connections handed to the model's replicas
    "IMAGE",  # its snapshot image: built, cached, building, not in store, ...
    "ERROR",
)

_CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen


class StatusUnreadable(Exception):
    """`thaw up` could not be read at the URL; the message says why."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "status",
        help="show every model behind a running `thaw up`",
        description="Print model, state (cold/waking/warm/draining/unavailable), replicas "
        "ready/desired, held requests and the last cold start of a running `thaw up`; with "
        "--cost, what each model used (replica- and GPU-seconds) against always-on replicas "
        "at its observed peak. The same live view is on the status page, http://HOST:PORT/ui/.",
    )
    p.add_argument(
        "--url",
        default="http://127.0.0.1:8000",
        help="where `thaw up` listens (default http://127.0.0.1:8000; HOST:PORT alone means "
        "http://HOST:PORT)",
    )
    p.add_argument("--json", action="store_true", help="print the raw JSON (one line per frame "
                   "with --watch)")  # fmt: skip
    p.add_argument("--cost", action="store_true", help="print the cost view instead")
    p.add_argument(
        "--gpu-hour-price",
        type=float,
        default=None,
        metavar="PRICE",
        help="price of one GPU-hour for the cost view's money columns (default: the one "
        "`thaw up --gpu-hour-price` was given, if any)",
    )
    p.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=2.0,
        default=None,
        metavar="SECONDS",
        help="redraw every SECONDS (default 2) until Ctrl-C",
    )
    p.add_argument(
        "--timeout-s", type=float, default=5.0, help="give up after this long (default 5)"
    )
    p.set_defaults(func=run)


def _aligned(rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset()) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    ]


def format_table(status: StatusDocument) -> str:
    rows: list[Sequence[str]] = [_COLUMNS]
    for m in status.models:
        cold = m.last_cold_start_s
        rows.append(
            (
                m.model,
                _state(m),
                f"{m.replicas_ready}/{m.replicas_desired}",
                str(m.held_requests),
                str(m.in_flight),
                "-" if cold is None else f"{cold:.3f} s",
                _first_token(m),
                str(m.direct_connections),
                status.image_builds.get(m.model, "-")[:40],
                (m.last_error or "")[:60],
            )
        )
    lines = _aligned(rows)
    lines += _pool_lines(status.warm_pool)
    lines += _shared_lines(status.shared)
    return "\n".join(lines)


def _state(model: ModelStatus) -> str:
    """Its state; in explicit model control, a model not loaded (or unloaded) says so."""
    if model.load_state is not None and model.load_state != "loaded":
        return f"{model.state.value} ({model.load_state})"
    return model.state.value


def _first_token(model: ModelStatus) -> str:
    """`cold/warm s` for a model served through the OpenAI API, `-` for one never asked."""
    cold, warm = model.first_token_cold_s, model.first_token_warm_s
    if cold is None and warm is None:
        return "-"
    return "/".join("-" if s is None else f"{s:.3f}" for s in (cold, warm)) + " s"


def _shared_lines(shared: SharedReport) -> list[str]:
    """Shared replicas (`thaw.placement` shared): each one's models and budget used, then
    each shared model's evictions and loads by source."""
    lines = []
    for r in shared.replicas:
        models = ", ".join(r.models) or "(none: released after its grace)"
        used = f"{_mib(r.used_bytes)} of {_mib(r.budget_bytes)}"
        where = f"pid {r.pid}" if r.pid is not None else r.url  # a pod has no pid here
        lines.append(f"shared replica {r.id} ({where}): {used}: {models}")
    for model, counts in shared.models.items():
        if counts.evictions or counts.loads:
            loads = ", ".join(f"{n} from {source}" for source, n in sorted(counts.loads.items()))
            lines.append(f"  {model}: evicted {counts.evictions}x; loads {loads or 'none'}")
    return lines


def _pool_lines(pool: PoolStatus) -> list[str]:
    """The warm pool: ready/target, where processes come from, their memory."""
    head = f"warm pool: {pool.ready}/{pool.size} ready"
    if pool.starting:
        head += f", {pool.starting} starting"
    details = [d for d in (pool.source, pool.limit and f"size set by {pool.limit}") if d]
    if pool.demand:
        models = "model" if pool.demand == 1 else "models"
        details.append(f"{pool.demand} {models} woke recently")
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


def _seconds(value: float) -> str:
    return f"{value:,.1f}"


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def format_cost(status: StatusDocument, *, gpu_hour_price: float | None = None) -> str:
    """The cost view: per model and in total, seconds used vs always-on at the peak."""
    price = gpu_hour_price if gpu_hour_price is not None else status.cost.gpu_hour_price
    header = [
        "MODEL", "GPUS", "PEAK", "REPLICA-S", "GPU-S", "IDLE AT ZERO-S", "ALWAYS-ON REPLICA-S",
        "SAVED REPLICA-S", "SAVED GPU-S", "SAVED",
    ]  # fmt: skip
    if price is not None:
        header += ["SPENT", "SAVED MONEY"]
    figures = list(status.cost.models)
    rows: list[Sequence[str]] = [header]
    rows += [_cost_row(_CostRow.of(c), price) for c in figures]
    if figures:
        rows.append(_cost_row(_CostRow.total(figures), price))
    observed = max((c.observed_s for c in figures), default=0.0)
    lines = _aligned(rows, right=frozenset(range(1, len(header))))
    lines.append(
        f"observed {observed:,.0f} s; always-on = each model's observed peak of ready replicas "
        "kept for the whole time (min_replicas = peak)"
        + (f"; money at {price:g} per GPU-hour" if price is not None else "")
    )
    return "\n".join(lines)


@dataclass(frozen=True)
class _CostRow:
    """One line of the cost view: a model's figures, or the sums of all (TOTAL)."""

    model: str
    gpus: str
    peak: int
    replica_s: float
    gpu_s: float
    idle_s: float
    always_on_s: float
    saved_s: float
    saved_gpu_s: float

    @classmethod
    def of(cls, c: CostFigures) -> _CostRow:
        return cls(
            c.model, str(c.gpus_per_replica), c.peak_replicas, c.replica_seconds, c.gpu_seconds,
            c.idle_at_zero_s, c.always_on_replica_seconds, c.saved_replica_seconds,
            c.saved_gpu_seconds,
        )  # fmt: skip

    @classmethod
    def total(cls, figures: Sequence[CostFigures]) -> _CostRow:
        rows = [cls.of(c) for c in figures]
        return cls(
            "TOTAL", "", sum(r.peak for r in rows), sum(r.replica_s for r in rows),
            sum(r.gpu_s for r in rows), sum(r.idle_s for r in rows),
            sum(r.always_on_s for r in rows), sum(r.saved_s for r in rows),
            sum(r.saved_gpu_s for r in rows),
        )  # fmt: skip


def _cost_row(r: _CostRow, price: float | None) -> list[str]:
    row = [
        r.model, r.gpus, str(r.peak), _seconds(r.replica_s), _seconds(r.gpu_s),
        _seconds(r.idle_s), _seconds(r.always_on_s), _seconds(r.saved_s),
        _seconds(r.saved_gpu_s),
        "-" if r.always_on_s <= 0 else f"{r.saved_s / r.always_on_s:.0%}",
    ]  # fmt: skip
    if price is not None:
        row += [_money(priced(r.gpu_s, price)), _money(priced(r.saved_gpu_s, price))]
    return row


def fetch(url: str, timeout_s: float) -> tuple[Any, StatusDocument]:
    """The raw answer of `GET URL/thaw/status` and its parsed document; StatusUnreadable.
    A URL without a scheme (`localhost:8000`, as curl takes it) is plain HTTP."""
    base = url if "://" in url else f"http://{url}"
    target = base.rstrip("/") + "/thaw/status"
    try:
        with urllib.request.urlopen(target, timeout=timeout_s) as resp:
            raw = json.loads(resp.read())
        try:
            return raw, StatusDocument.from_json(raw)
        except ValueError as exc:
            raise ValueError(f"the answer is not a `thaw up` status document ({exc})") from None
    except urllib.error.HTTPError as exc:
        raise StatusUnreadable(
            f"cannot read {target}: HTTP {exc.code} (not a `thaw up`?)"
        ) from None
    except urllib.error.URLError as exc:
        raise StatusUnreadable(
            f"cannot read {target}: {exc.reason} (is `thaw up` running there?)"
        ) from None
    except (OSError, ValueError) as exc:
        raise StatusUnreadable(f"cannot read {target}: {exc}") from None


def _render(args: argparse.Namespace, raw: Any, status: StatusDocument) -> str:
    if args.json:
        return json.dumps(raw, separators=(",", ":")) if args.watch else json.dumps(raw, indent=2)
    if args.cost:
        return format_cost(status, gpu_hour_price=args.gpu_hour_price)
    return format_table(status)


def watch(
    frame: Callable[[], str],
    *,
    interval_s: float,
    out: TextIO,
    clear: bool,
    sleep: Callable[[float], None] = time.sleep,
    frames: int | None = None,
) -> int:
    """Print `frame()` every `interval_s` (clearing the screen first when `clear`), until
    Ctrl-C or after `frames` frames; a frame that cannot be read shows why, and the watch
    goes on (`thaw up` may be restarting)."""
    shown = 0
    try:
        while frames is None or shown < frames:
            try:
                text = frame()
            except StatusUnreadable as exc:
                text = f"thaw status: {exc} (retrying every {interval_s:g} s)"
            stamp = time.strftime("%H:%M:%S")
            if clear:
                out.write(f"{_CLEAR}thaw status, every {interval_s:g} s, {stamp}\n\n{text}\n")
            else:
                out.write(f"{text}\n")
            out.flush()
            shown += 1
            if frames is None or shown < frames:
                sleep(interval_s)
    except KeyboardInterrupt:
        pass
    return 0


def run(args: argparse.Namespace) -> int:
    for flag, value, low, high in (
        ("--gpu-hour-price", args.gpu_hour_price, 0, 1_000_000),
        ("--watch", args.watch, 0.1, 3600),
    ):
        problem = None if value is None else out_of_range(flag, value, low, high)
        if problem is not None:
            print(f"thaw status: error: {problem}", file=sys.stderr)
            return 2
    if args.watch is not None:

        def frame() -> str:
            return _render(args, *fetch(args.url, args.timeout_s))

        clear = sys.stdout.isatty() and not args.json
        return watch(frame, interval_s=args.watch, out=sys.stdout, clear=clear)
    try:
        raw, status = fetch(args.url, args.timeout_s)
    except StatusUnreadable as exc:
        print(f"thaw status: {exc}", file=sys.stderr)
        return 1
    print(_render(args, raw, status))
    return 0
