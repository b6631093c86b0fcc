"""The soak's report (benchmarks/soak.py): latency and process tables from its outcomes and
samples, and the markdown written next to the JSON."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from benchmarks import soak_stats
from benchmarks.soak_stats import Outcome, Targets

__all__ = ["latency_table", "markdown", "process_table", "tables", "verdict"]


def latency_table(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    """p50/p99/max of the answered requests of each (kind, phase)."""
    rows = []
    groups: dict[tuple[str, str], list[float]] = {}
    for o in outcomes:
        if o.result in ("ok", "refused"):  # answered (abandoned ones linger on purpose)
            groups.setdefault((o.kind, o.phase), []).append(o.latency_s)
    for (kind, phase), values in sorted(groups.items()):
        rows.append(
            {
                "kind": kind,
                "phase": phase,
                "n": len(values),
                "p50_ms": 1000 * soak_stats.percentile(values, 50),
                "p99_ms": 1000 * soak_stats.percentile(values, 99),
                "max_ms": 1000 * max(values),
            }
        )
    return rows


def process_table(
    series: list[soak_stats.Series],
    window: tuple[float, float],
    targets: Targets,
    judged_roles: frozenset[str],
) -> list[dict[str, Any]]:
    """Slopes of each process that lived through `window` (the activator's fds also at a
    fixed number of live processes: `fd_growth`); short-lived ones counted in a last row."""
    lived = {s.pid for s in soak_stats.long_lived(series, window, targets.long_lived_fraction)}
    rows = []
    for s in series:
        if s.pid not in lived:
            continue
        rss, fds, n = soak_stats.slopes(s, window)
        rss_se, fds_se = soak_stats.slope_errors(s, window)
        inside = [x for x in s.samples if window[0] <= x.t_s <= window[1]]
        rows.append(
            {
                "role": s.role,
                "pid": s.pid,
                "samples": n,
                "rss_first_mib": inside[0].rss_bytes / 2**20,
                "rss_last_mib": inside[-1].rss_bytes / 2**20,
                "rss_slope_mib_per_min": rss / 2**20,
                "rss_slope_se_mib_per_min": rss_se / 2**20,
                "judged": s.role in judged_roles,
                "fds_min": min(x.fds for x in inside),
                "fds_max": max(x.fds for x in inside),
                "fd_slope_per_min": fds,
                "fd_slope_se_per_min": fds_se,
            }
        )
        if s.role == "activator":
            rows[-1]["fd_growth"] = asdict(soak_stats.fd_growth(s, series, window))
    short = [s for s in series if s.pid not in lived]
    rows.append(
        {
            "role": f"short-lived (pool processes, replicas of woken models): {len(short)}",
            "pid": None,
        }
    )
    return rows


def tables(report: dict[str, Any]) -> list[str]:
    """The checks, tallies, latencies and processes of a report, as markdown lines."""
    out = ["| check | held | measured | limit |", "|---|---|---|---|"]
    out += [
        f"| {c['name']} | {'yes' if c['held'] else '**NO**'} | {c['measured']} | {c['limit']} |"
        for c in report["checks"]
    ]
    out += ["", "| class | sent | results |", "|---|---|---|"]
    for klass, row in report["tallies"].items():
        results = ", ".join(f"{k} {v}" for k, v in row.items() if k != "sent")
        out.append(f"| {klass} | {row['sent']} | {results} |")
    out += ["", "| kind | phase | n | p50 | p99 | max |", "|---|---|---|---|---|---|"]
    for r in report["latency"]:
        out.append(
            f"| {r['kind']} | {r['phase']} | {r['n']} | {r['p50_ms']:.1f} ms | "
            f"{r['p99_ms']:.1f} ms | {r['max_ms']:.1f} ms |"
        )
    out += [
        "",
        "| process (judged?) | pid | samples | RSS first → last | RSS slope ± s.e. | fds min-max "
        "| fd slope ± s.e. |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in report["processes"]:
        if p["pid"] is None:
            out.append(f"| {p['role']} | | | | | | |")
            continue
        out.append(
            f"| {p['role']} ({'yes' if p['judged'] else 'no'}) | {p['pid']} | {p['samples']} | "
            f"{p['rss_first_mib']:.1f} → {p['rss_last_mib']:.1f} MiB | "
            f"{p['rss_slope_mib_per_min']:+.3f} ± {p['rss_slope_se_mib_per_min']:.3f} MiB/min | "
            f"{p['fds_min']}-{p['fds_max']} | "
            f"{p['fd_slope_per_min']:+.2f} ± {p['fd_slope_se_per_min']:.2f} /min |"
        )
    return out


def verdict(report: dict[str, Any]) -> str:
    return "\nverdict: " + ("PASSED" if report["passed"] else "FAILED")


def markdown(report: dict[str, Any]) -> str:
    """The report of a `thaw up` soak as markdown: `tables`, the wakes, then the verdict."""
    out = tables(report)
    wake_counts = ", ".join(f"{k} {v}" for k, v in sorted(report["cold_starts"].items()))
    out += [
        "",
        f"cold starts (thaw_cold_start_seconds_count): {wake_counts}; most requests seen "
        f"held at once (status every {report['config']['sample_s']:g} s): "
        f"{report['max_held_seen']}; reference wakes (isolated, each model): "
        + ", ".join(f"{1000 * t:.0f} ms" for t in report["reference_wakes_s"]),
        f"machine: {report['cpus']} CPUs, 1-min load average {report['load_average'][0]:.1f} at "
        f"start, {report['load_average'][1]:.1f} at end; processes seen: "
        f"{report['processes_seen']}",
    ]
    if report["notes"]:
        out += ["", "notes: " + "; ".join(report["notes"][:20])]
    out.append(verdict(report))
    return "\n".join(out)
