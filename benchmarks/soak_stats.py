"""The soak's verdict: percentiles, least-squares slopes and the invariants, from recorded
outcomes and process samples. Pure: no clock, no processes, no network (tests feed it data).

An `Outcome` is one request of the soak; a `ProcSample` one reading of a process's RSS and
open file descriptors. `judge()` turns them, with the `Targets`, into a list of `Check`s, each
saying what was measured, the limit and whether it held; the soak fails if any check did not.
The activator's fd growth is judged at a fixed number of live processes (`fd_growth`).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from benchmarks.least_squares import least_squares_slope, net_slope, slope_stderr

__all__ = [
    "BAD_GOOD_RESULTS",
    "Check",
    "FdGrowth",
    "Outcome",
    "ProcSample",
    "Series",
    "Targets",
    "fd_growth",
    "flat_checks",
    "good_check",
    "hostile_check",
    "hung_check",
    "judge",
    "least_squares_slope",
    "live_processes",
    "percentile",
    "series_by_process",
    "slope_stderr",
    "warm_p99_check",
]

# Results of a good (well-formed) request; anything but "ok" fails the soak.
BAD_GOOD_RESULTS = ("error", "wrong", "lost", "hung")


@dataclass(frozen=True)
class Outcome:
    """One request: its class (http_json, grpc, hostile:<case>, ...), the model, the phase it
    was sent in (baseline, mixed), its kind (warm: the model was serving; waking: sent while
    it was at zero, so held; hostile), when (s from the start), how long, and the result.

    Results: ok (a good request answered 200 with the right output); error (answered, not
    200), wrong (200 with the wrong output), lost (connection closed or reset with no answer),
    hung (no answer within the client timeout); for hostile requests refused (a 4xx, or the
    connection closed by the server), abandoned (the client walked away on purpose, as the
    case says), accepted (2xx: a hostile request went through) or server_error (5xx)."""

    klass: str
    model: str
    phase: str
    kind: str
    started_s: float
    latency_s: float
    result: str
    detail: str = ""


@dataclass(frozen=True)
class ProcSample:
    """One reading of one process: `role` is activator, fork_server, replica:<model> or pool."""

    t_s: float
    pid: int
    role: str
    rss_bytes: int
    fds: int


@dataclass(frozen=True)
class Series:
    """Every sample of one process, oldest first."""

    pid: int
    role: str
    samples: tuple[ProcSample, ...]

    @property
    def span_s(self) -> float:
        return self.samples[-1].t_s - self.samples[0].t_s if self.samples else 0.0


@dataclass(frozen=True)
class Targets:
    """The limits the run is judged by (the soak's flags)."""

    warm_p99_factor: float  # mixed-phase warm p99 <= factor x baseline warm p99 ...
    warm_p99_floor_s: float  # ... or baseline + this, whichever is larger
    waking_p99_s: float  # held requests' p99 (wake + queue) <= this
    rss_slope_bytes_per_min: float  # growth of every long-lived process's RSS, at most
    fd_slope_per_min: float  # growth of its open fds, at most
    fd_checkpoint_delta: int  # activator fds, quiet end - quiet start
    long_lived_fraction: float = 0.9  # a process sampled over this much of the steady window


@dataclass(frozen=True)
class Check:
    name: str
    held: bool
    measured: str
    limit: str


@dataclass(frozen=True)
class FdGrowth:
    """The activator's open fds over the steady window, per minute. `judged` ± `judged_se`
    is b in fds = a + b·t + c·n_live, the growth at a fixed number of live processes;
    `per_process` is c, the fds one live process costs the activator (None when not fitted);
    `plain` ± `plain_se` the plain slope; `live` the fewest and most processes alive.
    `fallback` says why the plain slope is judged instead of b ("" when b was fitted)."""

    judged: float
    judged_se: float
    per_process: float | None
    plain: float
    plain_se: float
    samples: int
    live: tuple[int, int]
    fallback: str = ""


@dataclass
class _Tally:
    sent: int = 0
    by_result: Counter[str] = field(default_factory=Counter)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def series_by_process(samples: Iterable[ProcSample]) -> list[Series]:
    """Samples grouped per pid (a replica's role is the last one seen: its model)."""
    grouped: dict[int, list[ProcSample]] = defaultdict(list)
    for sample in samples:
        grouped[sample.pid].append(sample)
    out = []
    for pid, rows in grouped.items():
        rows.sort(key=lambda s: s.t_s)
        out.append(Series(pid, rows[-1].role, tuple(rows)))
    return sorted(out, key=lambda s: (s.role, s.pid))


def tallies(outcomes: Iterable[Outcome]) -> dict[str, dict[str, int]]:
    """Per class: sent and the count of each result."""
    table: dict[str, _Tally] = defaultdict(_Tally)
    for o in outcomes:
        table[o.klass].sent += 1
        table[o.klass].by_result[o.result] += 1
    return {
        k: {"sent": t.sent, **dict(sorted(t.by_result.items()))} for k, t in sorted(table.items())
    }


def latencies(outcomes: Iterable[Outcome], *, kind: str, phase: str | None = None) -> list[float]:
    return [
        o.latency_s
        for o in outcomes
        if o.kind == kind and o.result == "ok" and (phase is None or o.phase == phase)
    ]


def slopes(series: Series, window: tuple[float, float]) -> tuple[float, float, int]:
    """RSS bytes/min and fds/min over the samples inside `window`, and how many there were."""
    rss, fds = _points(series, window)
    return least_squares_slope(rss), least_squares_slope(fds), len(rss)


def slope_errors(series: Series, window: tuple[float, float]) -> tuple[float, float]:
    """Standard errors of `slopes()` (bytes/min, fds/min)."""
    rss, fds = _points(series, window)
    return slope_stderr(rss), slope_stderr(fds)


def _points(
    series: Series, window: tuple[float, float]
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    inside = [s for s in series.samples if window[0] <= s.t_s <= window[1]]
    return (
        [(s.t_s / 60, float(s.rss_bytes)) for s in inside],
        [(s.t_s / 60, float(s.fds)) for s in inside],
    )


def long_lived(
    series: Sequence[Series], window: tuple[float, float], fraction: float
) -> list[Series]:
    """Processes sampled over at least `fraction` of the window (the ones a slope means
    something for: the activator, the fork server, replicas of models kept warm)."""
    need = fraction * (window[1] - window[0])
    out = []
    for s in series:
        inside = [x.t_s for x in s.samples if window[0] <= x.t_s <= window[1]]
        if len(inside) >= 3 and inside[-1] - inside[0] >= need:
            out.append(s)
    return out


STUB_MODULE = "runtime.python.stub.stub_main"  # in a Python stub's command line


def live_processes(series: Iterable[Series]) -> dict[float, int]:
    """Per sample time, how many of `series` were sampled then. One sampling pass reads every
    process of the tree at one time (benchmarks/soak.py `sample_processes`), so given every
    process but the activator this is how many descendants it had alive at each of its
    samples; one that ended between the pass's listing and its reading is left out, as gone."""
    counts: Counter[float] = Counter()
    for s in series:
        counts.update(x.t_s for x in s.samples)
    return dict(counts)


def fd_growth(activator: Series, series: Sequence[Series], window: tuple[float, float]) -> FdGrowth:
    """The activator's fd growth inside `window` with the processes alive under it held
    fixed. Each replica and pool process costs the activator fds while it lives (its stdout
    and stderr pipes, a pidfd, sockets to it), and how many overlap moves with the machine's
    load, so the plain slope drifts either way with no leak; a leak is growth at a fixed
    count. The count is every descendant that costs the activator fds: the fork server, pool
    processes and replicas, not Python stubs (role "stub"), which cost it nothing and, since
    pool processes start a spare stub while idle (stop 66), no longer come and go with the
    replicas alone. When the count is constant, or a straight line in time, b and c cannot be
    told apart and the plain slope is judged."""
    live = live_processes(s for s in series if s.pid != activator.pid and s.role != "stub")
    inside = [x for x in activator.samples if window[0] <= x.t_s <= window[1]]
    counts = [live.get(x.t_s, 0) for x in inside]
    plain_points = [(x.t_s / 60, float(x.fds)) for x in inside]
    plain, plain_se = least_squares_slope(plain_points), slope_stderr(plain_points)
    span = (min(counts), max(counts)) if counts else (0, 0)
    fit = net_slope(
        [(x.t_s / 60, float(n), float(x.fds)) for x, n in zip(inside, counts, strict=True)]
    )
    if fit is not None:
        return FdGrowth(fit.slope, fit.slope_se, fit.per_z, plain, plain_se, len(inside), span)
    if len(inside) < 4:
        why = f"{len(inside)} samples, too few to fit"
    elif span[0] == span[1]:
        why = f"live processes constant at {span[0]}"
    else:
        why = "live processes a straight line in time"
    return FdGrowth(plain, plain_se, None, plain, plain_se, len(inside), span, why)


def _fd_growth_check(s: Series, growth: FdGrowth, tolerance: float) -> Check:
    if growth.per_process is None:
        measured = (
            f"{growth.plain:+.2f} ± {growth.plain_se:.2f} fds/min, plain slope ({growth.fallback})"
        )
    else:
        measured = (
            f"{growth.judged:+.2f} ± {growth.judged_se:.2f} fds/min at a fixed process count "
            f"({growth.per_process:+.2f} fds per live process, {growth.live[0]}-"
            f"{growth.live[1]} alive); plain slope {growth.plain:+.2f} ± {growth.plain_se:.2f}"
        )
    return Check(
        f"fds flat: {s.role} pid {s.pid}",
        growth.judged <= tolerance,
        measured,
        f"growth at a fixed process count <= {tolerance:g} fds/min",
    )


def _ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1000:.1f} ms"


def hung_check(outcomes: Sequence[Outcome]) -> Check:
    """No request of any class went unanswered past the client timeout."""
    hung = [o for o in outcomes if o.result == "hung"]
    return Check("no hung request (any class)", not hung, f"{len(hung)} hung", "0")


def good_check(outcomes: Sequence[Outcome]) -> Check:
    """Every good (not hostile) request answered 200 with the right output."""
    good = [o for o in outcomes if o.kind != "hostile"]
    bad = Counter(o.result for o in good if o.result in BAD_GOOD_RESULTS)
    return Check(
        "every good request answered 200 with the right output",
        not bad and bool(good),
        f"{len(good)} sent, " + (", ".join(f"{n} {r}" for r, n in sorted(bad.items())) or "all ok"),
        "0 error/wrong/lost/hung",
    )


def hostile_check(outcomes: Sequence[Outcome]) -> Check:
    """Every hostile request refused (a 4xx or a close) or abandoned as its case says."""
    hostile = [o for o in outcomes if o.kind == "hostile"]
    hostile_bad = Counter(o.result for o in hostile if o.result not in ("refused", "abandoned"))
    return Check(
        "every hostile request refused cleanly (4xx or closed)",
        not hostile_bad and bool(hostile),
        f"{len(hostile)} sent, "
        + (", ".join(f"{n} {r}" for r, n in sorted(hostile_bad.items())) or "all clean"),
        "0 accepted/server_error/hung",
    )


def warm_p99_check(outcomes: Sequence[Outcome], targets: Targets) -> Check:
    """The warm p99 of the mixed phase against the baseline phase's, of the same run."""
    base = percentile(latencies(outcomes, kind="warm", phase="baseline"), 99)
    mixed = percentile(latencies(outcomes, kind="warm", phase="mixed"), 99)
    limit = max(base * targets.warm_p99_factor, base + targets.warm_p99_floor_s)
    return Check(
        "warm p99 under mixed traffic within target",
        not math.isnan(mixed) and mixed <= limit,
        f"{_ms(mixed)} (baseline {_ms(base)})",
        f"<= {_ms(limit)} (max({targets.warm_p99_factor:g} x baseline, baseline + "
        f"{_ms(targets.warm_p99_floor_s)}))",
    )


def flat_checks(
    s: Series,
    series: Sequence[Series],
    window: tuple[float, float],
    targets: Targets,
    *,
    by_live: Collection[str],
) -> list[Check]:
    """`s`'s RSS and fd growth over `window`; its fds at a fixed number of live processes
    (`fd_growth`) when its role is in `by_live`, else its plain fd slope."""
    rss, fds, n = slopes(s, window)
    checks = [
        Check(
            f"RSS flat: {s.role} pid {s.pid}",
            rss <= targets.rss_slope_bytes_per_min,
            f"{rss / 2**20:+.3f} MiB/min ({n} samples)",
            f"slope <= {targets.rss_slope_bytes_per_min / 2**20:g} MiB/min",
        )
    ]
    if s.role in by_live:
        checks.append(_fd_growth_check(s, fd_growth(s, series, window), targets.fd_slope_per_min))
    else:
        checks.append(
            Check(
                f"fds flat: {s.role} pid {s.pid}",
                fds <= targets.fd_slope_per_min,
                f"{fds:+.2f} fds/min",
                f"slope <= {targets.fd_slope_per_min:g} fds/min",
            )
        )
    return checks


def judge(
    outcomes: Sequence[Outcome],
    series: Sequence[Series],
    *,
    window: tuple[float, float],
    targets: Targets,
    fd_checkpoints: tuple[int, int] | None,
    held_at_end: int,
    wakes: int,
    exit_code: int | None,
    left_running: Sequence[int],
    judged_roles: frozenset[str],
) -> list[Check]:
    """Every invariant of the soak as a Check. RSS and fd slopes are judged for the
    long-lived processes whose role is in `judged_roles` (the activator, the fork server, the
    replicas of the models kept warm); a replica of a woken model that happened to stay up is
    reported, not judged (its first minutes are its model's load). A leak is growth: a
    slope is judged against the tolerance on the growing side only. The activator's fds
    fall and rise with how many replicas and pool processes are up at the time, so its
    growth is judged with that count held fixed (`fd_growth`); the fork server's and the
    replicas' are plain slopes, as no count of other processes moves them: the zygote keeps
    no fd of a child it forked, and a replica's fds follow its own connections."""
    checks = [hung_check(outcomes), good_check(outcomes)]
    good = [o for o in outcomes if o.kind != "hostile"]
    waking = [o for o in good if o.kind == "waking"]
    waking_bad = sum(1 for o in waking if o.result != "ok")
    checks.append(
        Check(
            "every held (waking) request answered",
            bool(waking) and waking_bad == 0 and held_at_end == 0,
            f"{len(waking)} held, {waking_bad} not answered ok; {held_at_end} still held at end",
            "all answered, 0 held at end",
        )
    )
    checks.append(Check("scale-up/down churn happened", wakes > 0, f"{wakes} cold starts", "> 0"))
    checks += [hostile_check(outcomes), warm_p99_check(outcomes, targets)]
    wake_p99 = percentile(latencies(outcomes, kind="waking"), 99)
    checks.append(
        Check(
            "waking p99 within target",
            not math.isnan(wake_p99) and wake_p99 <= targets.waking_p99_s,
            _ms(wake_p99),
            f"<= {_ms(targets.waking_p99_s)}",
        )
    )
    lived = [
        s for s in long_lived(series, window, targets.long_lived_fraction) if s.role in judged_roles
    ]
    roles = {s.role for s in lived}
    checks.append(
        Check(
            "activator and fork server sampled over the steady window",
            {"activator", "fork_server"} <= roles,
            ", ".join(sorted(roles)) or "none",
            "activator, fork_server",
        )
    )
    for s in lived:
        checks += flat_checks(s, series, window, targets, by_live={"activator"})
    if fd_checkpoints is None:
        checks.append(
            Check("activator fds back at the quiet start count", False, "not reached", "")
        )
    else:
        start, end = fd_checkpoints
        checks.append(
            Check(
                "activator fds back at the quiet start count",
                end - start <= targets.fd_checkpoint_delta,
                f"{start} -> {end}",
                f"end - start <= {targets.fd_checkpoint_delta}",
            )
        )
    checks.append(
        Check(
            "thaw up stopped cleanly, nothing left running",
            exit_code == 0 and not left_running,
            f"exit {exit_code}, left running: {list(left_running) or 'none'}",
            "exit 0, none",
        )
    )
    return checks
