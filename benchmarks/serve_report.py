"""The tables `serve_throughput` prints: one cell per server, model, concurrency and protocol,
its median round, the ratios to the best peer by req/s and by CPU per request, and each cell's
spread over its rounds (so a before/after overlap can be read off)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from benchmarks.load_client import LoadResult

__all__ = ["BASE", "Cell", "is_thaw", "median_round", "render_spread", "render_table"]

BASE = "thaw-base"  # thaw from `--thaw-base-tree`: the "before" of a before/after


@dataclass(frozen=True)
class Cell:
    """One measurement: a server, a model, a concurrency, and what it got (or why not)."""

    server: str
    model: str
    concurrency: int
    result: LoadResult | None
    note: str = ""
    protocol: str = "http"
    rounds: tuple[LoadResult, ...] = ()  # every round, in the order run (`result` is the median)


def is_thaw(server: str) -> bool:
    """Whether a row's server is thaw (`thaw`, `thaw[<python runtime>]`, or the base tree's
    `thaw-base`, `thaw-base[<python runtime>]`)."""
    return server.partition("[")[0] in ("thaw", BASE)


def median_round(results: list[LoadResult]) -> LoadResult | None:
    """The round with the median req/s (lower middle for an even count); None without rounds."""
    if not results:
        return None
    ordered = sorted(results, key=lambda r: r.rps)
    return ordered[(len(ordered) - 1) // 2]


def render_table(cells: list[Cell]) -> str:
    """Markdown table; per row group, req/s over the best non-thaw server's, and the server
    tree's CPU per request over the thriftiest non-thaw server's (lower is better)."""
    lines = [
        "| protocol | model | concurrency | server | req/s | p50 ms | p99 ms | CPU µs/req "
        "| errors | vs best peer | CPU vs peer |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, str, int], list[Cell]] = {}
    for cell in cells:
        groups.setdefault((cell.protocol, cell.model, cell.concurrency), []).append(cell)
    for (protocol, model, concurrency), group in groups.items():
        peers = [c.result.rps for c in group if c.result and not is_thaw(c.server)]
        best = max(peers, default=0.0)
        peer_cpus = [
            cpu
            for c in group
            if c.result and not is_thaw(c.server)
            for cpu in [c.result.cpu_us_per_request]
            if cpu is not None
        ]
        thriftiest = min(peer_cpus, default=0.0)
        for cell in group:
            if cell.result is None:
                lines.append(
                    f"| {protocol} | {model} | {concurrency} | {cell.server} | - | - | - | - | - "
                    f"| {cell.note} | - |"
                )
                continue
            r = cell.result
            ratio = f"{r.rps / best:.2f}x" if best > 0 else "-"
            if r.ok == 0:  # slower than the window: say so rather than print 0 and NaN
                ratio = "nothing completed in the window; raise --duration-s"
            cpu = r.cpu_us_per_request
            cpu_text = "-" if cpu is None else f"{cpu:.0f}"
            cpu_ratio = f"{cpu / thriftiest:.2f}x" if cpu is not None and thriftiest > 0 else "-"
            lines.append(
                f"| {protocol} | {model} | {concurrency} | {cell.server} | {r.rps:.1f} | "
                f"{r.percentile_ms(50):.2f} | {r.percentile_ms(99):.2f} | {cpu_text} "
                f"| {r.errors} | {ratio} | {cpu_ratio} |"
            )
    return "\n".join(lines)


def render_spread(cells: list[Cell]) -> str:
    """Markdown table of each cell's spread over its rounds: median (min to max) of req/s and of
    the CPU per request (rounds that probed it), so before/after overlap can be read off."""
    lines = [
        "| protocol | model | concurrency | server | rounds | req/s median (min to max) "
        "| CPU µs/req median (min to max) |",
        "|---|---|---:|---|---:|---:|---:|",
    ]
    for cell in cells:
        if not cell.rounds:
            continue
        rps = [r.rps for r in cell.rounds]
        cpus = [c for r in cell.rounds if (c := r.cpu_us_per_request) is not None]
        cpu = f"{statistics.median(cpus):.0f} ({min(cpus):.0f} to {max(cpus):.0f})" if cpus else "-"
        lines.append(
            f"| {cell.protocol} | {cell.model} | {cell.concurrency} | {cell.server} "
            f"| {len(rps)} | {statistics.median(rps):.0f} ({min(rps):.0f} to {max(rps):.0f}) "
            f"| {cpu} |"
        )
    return "\n".join(lines)
