"""The soak's verdict (benchmarks/soak_stats.py): slopes, percentiles and each invariant
failing on the data that breaks it."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from benchmarks.least_squares import net_slope
from benchmarks.soak_stats import (
    Check,
    Outcome,
    ProcSample,
    Targets,
    fd_growth,
    judge,
    least_squares_slope,
    percentile,
    series_by_process,
    slope_stderr,
)

TARGETS = Targets(
    warm_p99_factor=3.0,
    warm_p99_floor_s=0.05,
    waking_p99_s=1.0,
    rss_slope_bytes_per_min=1 << 20,
    fd_slope_per_min=1.0,
    fd_checkpoint_delta=2,
)
ROLES = frozenset({"activator", "fork_server"})
WINDOW = (10.0, 70.0)


def _outcomes(**override: str) -> list[Outcome]:
    rows = [Outcome("http_json", "m", "baseline", "warm", t, 0.002, "ok") for t in range(100)]
    rows += [Outcome("http_json", "m", "mixed", "warm", t, 0.003, "ok") for t in range(100)]
    rows += [Outcome("wake_grpc", "w", "mixed", "waking", 5.0, 0.2, "ok") for _ in range(12)]
    rows += [Outcome("hostile:malformed_json", "m", "mixed", "hostile", 6.0, 0.001, "refused")]
    rows += [Outcome("hostile:dropped_mid_request", "w", "mixed", "hostile", 6.0, 0.0, "abandoned")]
    for klass, result in override.items():
        kind = "hostile" if klass.startswith("hostile") else "waking" if "wake" in klass else "warm"
        rows.append(Outcome(klass.replace("__", ":"), "m", "mixed", kind, 7.0, 0.01, result))
    return rows


def _samples(rss_per_min: float = 0.0, fds_per_min: float = 0.0) -> list[ProcSample]:
    out = []
    for t in range(0, 80):
        for pid, role in ((1, "activator"), (2, "fork_server")):
            rss = int(100 * 2**20 + rss_per_min * t / 60) if pid == 1 else 300 * 2**20
            fds = int(30 + fds_per_min * t / 60) if pid == 1 else 9
            out.append(ProcSample(float(t), pid, role, rss, fds))
    return out


def _checks(outcomes: list[Outcome], samples: list[ProcSample], **kw: object) -> list[Check]:
    args: dict[str, object] = dict(
        window=WINDOW, targets=TARGETS, fd_checkpoints=(28, 28), held_at_end=0, wakes=3,
        exit_code=0, left_running=[], judged_roles=ROLES,
    )  # fmt: skip
    args.update(kw)
    return judge(outcomes, series_by_process(samples), **args)  # type: ignore[arg-type]


def _judge(outcomes: list[Outcome], samples: list[ProcSample], **kw: object) -> dict[str, bool]:
    checks = _checks(outcomes, samples, **kw)
    held: dict[str, bool] = {}
    for c in checks:  # "RSS flat: <role> pid <n>" checks of all processes under one name
        name = c.name.split(":")[0]
        held[name] = held.get(name, True) and c.held
    return held


def test_slope_and_its_error() -> None:
    points = [(x / 10, 3.0 * x / 10 + 1.0) for x in range(50)]
    assert least_squares_slope(points) == pytest.approx(3.0)
    assert slope_stderr(points) == pytest.approx(0.0, abs=1e-9)
    assert least_squares_slope([(1.0, 5.0)]) == 0.0
    noisy = [(x, (-1.0) ** x) for x in range(40)]
    assert slope_stderr(noisy) > 0


def test_net_slope_separates_growth_from_the_second_regressor() -> None:
    rows = [
        (t / 10, float((t * 7) % 5), 2.0 + 0.5 * t / 10 + 3.0 * ((t * 7) % 5)) for t in range(40)
    ]
    fit = net_slope(rows)
    assert fit is not None
    assert fit.slope == pytest.approx(0.5)
    assert fit.per_z == pytest.approx(3.0)
    assert fit.slope_se == pytest.approx(0.0, abs=1e-6)
    assert net_slope([(float(t), 4.0, float(t)) for t in range(40)]) is None  # z constant
    assert net_slope([(float(t), 2.0 * t + 1, float(t)) for t in range(40)]) is None  # z ~ x
    assert net_slope([(0.0, 1.0, 1.0), (1.0, 3.0, 2.0), (2.0, 2.0, 5.0)]) is None  # 3 rows


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert math.isnan(percentile([], 99))


def test_a_clean_run_passes_every_check() -> None:
    checks = _judge(_outcomes(), _samples())
    assert all(checks.values()), checks


@pytest.mark.parametrize(
    ("override", "failing"),
    [
        ({"http_json": "hung"}, "no hung request (any class)"),
        ({"grpc": "lost"}, "every good request answered 200 with the right output"),
        ({"http_binary": "wrong"}, "every good request answered 200 with the right output"),
        ({"wake_http_json": "error"}, "every held (waking) request answered"),
        ({"hostile__unknown_model": "server_error"}, "every hostile request refused cleanly"),
        ({"hostile__oversized_header": "accepted"}, "every hostile request refused cleanly"),
    ],
)
def test_each_bad_result_fails_its_check(override: dict[str, str], failing: str) -> None:
    checks = _judge(_outcomes(**override), _samples())
    assert not next(v for k, v in checks.items() if k.startswith(failing)), checks


def test_growth_beyond_the_tolerance_fails_and_within_passes() -> None:
    assert not _judge(_outcomes(), _samples(rss_per_min=4 * 2**20))["RSS flat"]
    assert _judge(_outcomes(), _samples(rss_per_min=0.5 * 2**20))["RSS flat"]
    assert not _judge(_outcomes(), _samples(fds_per_min=10))["fds flat"]
    # shrinking is no leak (fewer replicas up late in a run)
    assert _judge(_outcomes(), _samples(rss_per_min=-4 * 2**20, fds_per_min=-10))["fds flat"]


def test_fds_not_back_at_the_quiet_count_fails() -> None:
    name = "activator fds back at the quiet start count"
    assert not _judge(_outcomes(), _samples(), fd_checkpoints=(28, 60))[name]
    assert not _judge(_outcomes(), _samples(), fd_checkpoints=None)[name]


def test_latency_targets_are_relative_to_the_baseline() -> None:
    slow = [o if o.phase != "mixed" or o.kind != "warm" else
            Outcome(o.klass, o.model, o.phase, o.kind, o.started_s, 0.2, o.result)
            for o in _outcomes()]  # fmt: skip
    assert not _judge(slow, _samples())["warm p99 under mixed traffic within target"]
    held_slow = [o if o.kind != "waking" else
                 Outcome(o.klass, o.model, o.phase, o.kind, o.started_s, 2.0, o.result)
                 for o in _outcomes()]  # fmt: skip
    assert not _judge(held_slow, _samples())["waking p99 within target"]


def test_no_churn_requests_still_held_or_a_process_left_running_fail() -> None:
    assert not _judge(_outcomes(), _samples(), wakes=0)["scale-up/down churn happened"]
    assert not _judge(_outcomes(), _samples(), held_at_end=1)[
        "every held (waking) request answered"
    ]
    name = "thaw up stopped cleanly, nothing left running"
    assert not _judge(_outcomes(), _samples(), left_running=[123])[name]
    assert not _judge(_outcomes(), _samples(), exit_code=1)[name]


def test_a_short_lived_or_unjudged_process_is_not_judged() -> None:
    samples = _samples()
    # a woken model's replica loading its model: grows fast, lives 20 s of the window
    samples += [ProcSample(float(t), 9, "replica:w", (200 + t) * 2**20, 30) for t in range(20, 40)]
    samples += [ProcSample(float(t), 8, "replica:w2", (200 + t) * 2**20, 30) for t in range(80)]
    checks = _judge(_outcomes(), samples)
    assert all(checks.values()), checks


# ---- the activator's fds against the processes alive under it ----------------------------------

SOAK_WINDOW = (150.0, 600.0)  # a 10-minute soak's steady window


def _tree(
    live_at: Callable[[float], int], fds_at: Callable[[float, int], float], seed: int = 0
) -> list[ProcSample]:
    """Every 2 s: the activator, the fork server and `live_at(t) - 1` pool processes, as one
    sampling pass reads them; the activator's fds `fds_at(t, live)` plus a few client
    connections coming and going."""
    rng = random.Random(seed)
    out = []
    for step in range(300):
        t = 2.0 * step
        live = live_at(t)
        fds = round(fds_at(t, live)) + rng.randint(0, 4)
        out.append(ProcSample(t, 1, "activator", 80 * 2**20, fds))
        out.append(ProcSample(t, 2, "fork_server", 300 * 2**20, 9))
        out += [ProcSample(t, 100 + k, "pool", 200 * 2**20, 12) for k in range(live - 1)]
    return out


def _overlap(start: int, end: int) -> Callable[[float], int]:
    """Live processes drifting from `start` to `end` over the run (woken replicas overlapping
    more or less as the machine's load changes), a wake's replica or two on top now and then."""
    return lambda t: start + round((end - start) * t / 600) + (int(t) // 2 * 7) % 3


def _activator_fds(samples: list[ProcSample]) -> Check:
    checks = _checks(_outcomes(), samples, window=SOAK_WINDOW)
    return next(c for c in checks if c.name.startswith("fds flat: activator"))


def _growth(samples: list[ProcSample]) -> tuple[float, float, float | None, str]:
    series = series_by_process(samples)
    activator = next(s for s in series if s.role == "activator")
    g = fd_growth(activator, series, SOAK_WINDOW)
    return g.plain, g.judged, g.per_process, g.fallback


def test_fds_that_follow_the_live_processes_are_no_leak() -> None:
    """The 2026-12-04 failure: more woken replicas overlap as the load falls, each with its
    pipes, pidfd and sockets, and the plain slope climbs past 1 fd/min with nothing leaked."""
    samples = _tree(_overlap(4, 12), lambda t, live: 28 + 3 * live)
    plain, net, per_process, fallback = _growth(samples)
    assert plain > 1.0
    assert net == pytest.approx(0.0, abs=0.5)
    assert per_process == pytest.approx(3.0, abs=0.3)
    assert not fallback
    check = _activator_fds(samples)
    assert check.held, check
    assert "plain slope +" in check.measured


def test_stubs_coming_and_going_do_not_count_as_processes_the_activator_pays_for() -> None:
    """Pool processes start a spare stub while idle (stop 66): stubs appear and vanish apart
    from the replicas, and cost the activator no fd. Counted, they bent the fit (2026-12-07:
    +1.02 fds/min judged, 28 -> 28 at the quiet count); left out, the fds follow the rest."""
    samples = _tree(_overlap(4, 12), lambda t, live: 28 + 3 * live)
    for step in range(300):  # 0-6 stubs, on a cycle of their own
        t = 2.0 * step
        samples += [ProcSample(t, 900 + k, "stub", 20 * 2**20, 6) for k in range((step * 5) % 7)]
    _, net, per_process, _ = _growth(samples)
    assert net == pytest.approx(0.0, abs=0.5)
    assert per_process == pytest.approx(3.0, abs=0.3)
    assert _activator_fds(samples).held


def test_a_leak_at_a_constant_process_count_fails() -> None:
    samples = _tree(lambda t: 5, lambda t, live: 28 + 3 * live + 3 * t / 60)
    plain, net, per_process, fallback = _growth(samples)
    assert net == plain == pytest.approx(3.0, abs=0.3)
    assert per_process is None and fallback == "live processes constant at 5"
    assert not _activator_fds(samples).held


def test_a_leak_hidden_in_a_falling_process_count_fails() -> None:
    """3 fds/min leaked while fewer replicas overlap late in the run: the plain slope is
    within the tolerance, the growth at a fixed count is not."""
    samples = _tree(_overlap(12, 4), lambda t, live: 28 + 3 * live + 3 * t / 60)
    plain, net, per_process, _ = _growth(samples)
    assert plain <= 1.0
    assert net == pytest.approx(3.0, abs=0.5)
    assert per_process == pytest.approx(3.0, abs=0.3)
    check = _activator_fds(samples)
    assert not check.held, check


def test_a_leak_of_one_fd_per_wake_fails_however_the_processes_move() -> None:
    for start, end in ((4, 12), (12, 4), (8, 8)):
        samples = _tree(_overlap(start, end), lambda t, live: 28 + 3 * live + 14 * t / 60)
        assert not _activator_fds(samples).held, (start, end)


def test_a_constant_count_or_too_few_samples_judge_the_plain_slope() -> None:
    steady = _tree(lambda t: 5, lambda t, live: 28 + 3 * live)
    check = _activator_fds(steady)
    assert check.held, check
    assert "plain slope (live processes constant at 5)" in check.measured
    few = _checks(_outcomes(), steady, window=(100.0, 104.0))
    check = next(c for c in few if c.name.startswith("fds flat: activator"))
    assert "3 samples, too few to fit" in check.measured
