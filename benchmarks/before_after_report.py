"""Before/after comparison of benchmark runs: metrics out of each run's `--json`, one table.

Pure: given the JSON documents `serve_throughput.py` and `cold_start.py` wrote for the rounds of
each side (base and head), `compare` gives, per metric, each side's median and its spread over
the rounds (min-max), head/base, and a verdict; `render` prints it as Markdown. The runner that
produces the JSON is `before_after.py`.

The verdict is "within noise" when the two sides' ranges overlap, or when head/base is within
the tolerance of 1; otherwise "head better" or "head worse", by the metric's direction (req/s up
is better, seconds and milliseconds down).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EXTRACTORS",
    "Reading",
    "Row",
    "Spread",
    "cold_start_readings",
    "compare",
    "render",
    "serve_throughput_readings",
    "verdict",
]


@dataclass(frozen=True)
class Reading:
    """One metric of one run: its value (None when the run has none, `note` says why)."""

    value: float | None
    higher_is_better: bool
    note: str = ""
    hide_if_all_zero: bool = False  # a count (errors, failed) only worth a row when not 0


@dataclass(frozen=True)
class Spread:
    """One side's values of one metric over its rounds."""

    median: float
    low: float
    high: float
    count: int


@dataclass(frozen=True)
class Row:
    """One metric compared: each side's spread (None: no value in any round) and the verdict."""

    metric: str
    base: Spread | None
    head: Spread | None
    ratio: float | None  # head median / base median; None when either is missing or base is 0
    verdict: str


Readings = dict[str, Reading]  # metric name -> reading, in the benchmark's own order


def _number(value: Any) -> float | None:
    """A JSON number as a float; None for null, NaN (an empty window's percentile) or a string."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if math.isnan(value) else float(value)


# ---- serve_throughput.py ------------------------------------------------------------------------


def _is_thaw(server: str) -> bool:
    return server == "thaw" or server.startswith("thaw[")


def serve_throughput_readings(cells: list[dict[str, Any]]) -> Readings:
    """Thaw's req/s, p50 and p99 (and errors) per protocol x model x concurrency cell.

    `cells` is what `serve_throughput.py --json` writes: one object per (server, protocol,
    model, concurrency) with `rps`, `p50_ms`, `p99_ms`, `errors` (null when not measured, and
    then `note` says why). Other servers' rows are left out.
    """
    readings: Readings = {}
    for cell in cells:
        server = str(cell["server"])
        if not _is_thaw(server):
            continue
        name = f"{cell['protocol']} {cell['model']} c={cell['concurrency']}"
        if server != "thaw":
            name += f" {server}"
        note = str(cell.get("note") or "")
        if cell.get("rps") is None and not note:
            note = "not measured"
        readings[f"{name} req/s"] = Reading(_number(cell.get("rps")), True, note)
        readings[f"{name} p50 ms"] = Reading(_number(cell.get("p50_ms")), False, note)
        readings[f"{name} p99 ms"] = Reading(_number(cell.get("p99_ms")), False, note)
        readings[f"{name} errors"] = Reading(
            _number(cell.get("errors")), False, note, hide_if_all_zero=True
        )
    return readings


# ---- cold_start.py ------------------------------------------------------------------------------

_PHASES = ("claim", "restore", "warmup")


def _median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [v for v in (_number(run.get(key)) for run in runs) if v is not None]
    return statistics.median(values) if values else None


def cold_start_readings(results: dict[str, Any]) -> Readings:
    """Thaw's headline numbers from `cold_start.py --json`.

    Per model: the median cold start through `thaw up` as the client saw it and its claim /
    restore / warm-up phases (and without images, when measured); per burst: p50, p99 and
    failed requests; the warm path's p50 and req/s straight to the replica and through the
    activator. The naive process, the floor and Triton are left out: they run no thaw code.
    """
    readings: Readings = {}
    for name, model in results.get("models", {}).items():
        runs = model.get("thaw") or []
        readings[f"{name} cold start s"] = Reading(_median_of(runs, "client_s"), False)
        for phase in _PHASES:
            readings[f"{name} {phase} s"] = Reading(_median_of(runs, phase), False)
        if "thaw_no_image" in model:
            no_image = model["thaw_no_image"] or []
            readings[f"{name} cold start without images s"] = Reading(
                _median_of(no_image, "client_s"), False
            )
    for name, burst in results.get("burst", {}).items():
        readings[f"burst {name} p50 s"] = Reading(_number(burst.get("p50_s")), False)
        readings[f"burst {name} p99 s"] = Reading(_number(burst.get("p99_s")), False)
        readings[f"burst {name} failed"] = Reading(
            _number(burst.get("failed")), False, hide_if_all_zero=True
        )
    overhead = results.get("overhead") or {}
    for side in ("direct", "activator"):
        values = overhead.get(side) or {}
        readings[f"warm path {side} p50 ms"] = Reading(_number(values.get("p50_ms")), False)
        readings[f"warm path {side} req/s"] = Reading(_number(values.get("rps")), True)
    return readings


EXTRACTORS: dict[str, Callable[[Any], Readings]] = {
    "serve_throughput": serve_throughput_readings,
    "cold_start": cold_start_readings,
}


# ---- comparison ---------------------------------------------------------------------------------


def _spread(values: Sequence[float]) -> Spread | None:
    if not values:
        return None
    return Spread(statistics.median(values), min(values), max(values), len(values))


def verdict(base: Spread, head: Spread, higher_is_better: bool, tolerance: float) -> str:
    """`within noise` when the ranges overlap or head/base is within `tolerance` of 1;
    otherwise whether head is better or worse (by the metric's direction)."""
    if base.low <= head.high and head.low <= base.high:
        return "within noise"
    if base.median != 0 and abs(head.median / base.median - 1) <= tolerance:
        return "within noise"
    head_higher = head.median > base.median
    return "head better" if head_higher == higher_is_better else "head worse"


def _missing(side: str, readings: list[Reading]) -> str:
    notes = sorted({r.note for r in readings if r.note})
    return f"no {side} value" + (f" ({', '.join(notes)})" if notes else "")


def compare(base_runs: list[Readings], head_runs: list[Readings], tolerance: float) -> list[Row]:
    """One row per metric seen on either side, in the order the runs list them."""
    names: dict[str, None] = {}
    for readings in [*base_runs, *head_runs]:
        names.update(dict.fromkeys(readings))
    rows = []
    for name in names:
        base_readings = [r[name] for r in base_runs if name in r]
        head_readings = [r[name] for r in head_runs if name in r]
        first = (base_readings or head_readings)[0]
        base_values = [r.value for r in base_readings if r.value is not None]
        head_values = [r.value for r in head_readings if r.value is not None]
        if first.hide_if_all_zero and not any([*base_values, *head_values]):
            continue
        base, head = _spread(base_values), _spread(head_values)
        if base is None or head is None:
            missing = [("base", base_readings)] if base is None else []
            missing += [("head", head_readings)] if head is None else []
            text = "; ".join(_missing(side, readings) for side, readings in missing)
            rows.append(Row(name, base, head, None, text))
            continue
        ratio = head.median / base.median if base.median != 0 else None
        rows.append(
            Row(name, base, head, ratio, verdict(base, head, first.higher_is_better, tolerance))
        )
    return rows


# ---- rendering ----------------------------------------------------------------------------------


def _fmt(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    if magnitude >= 0.01:
        return f"{value:.3f}"
    return f"{value:.3g}"  # a sub-millisecond phase: 3.84e-05, not 0.000


def _side(spread: Spread | None) -> tuple[str, str]:
    if spread is None:
        return "-", "-"
    return _fmt(spread.median), f"{_fmt(spread.low)}-{_fmt(spread.high)}"


def render(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| metric | base median | base range | head median | head range | head/base | verdict |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        base_median, base_range = _side(row.base)
        head_median, head_range = _side(row.head)
        ratio = f"{row.ratio:.3f}" if row.ratio is not None else "-"
        lines.append(
            f"| {row.metric} | {base_median} | {base_range} | {head_median} | {head_range} "
            f"| {ratio} | {row.verdict} |"
        )
    return "\n".join(lines)
