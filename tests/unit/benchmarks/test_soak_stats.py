"""The soak's verdict (benchmarks/soak_stats.py): slopes, percentiles and each invariant
failing on the data that breaks it."""

from __future__ import annotations

import math

import pytest

from benchmarks.least_squares import net_slope
from benchmarks.soak_stats import (
    Outcome,
    ProcSample,
    Targets,
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


def _judge(outcomes: list[Outcome], samples: list[ProcSample], **kw: object) -> dict[str, bool]:
    args: dict[str, object] = dict(
        window=WINDOW, targets=TARGETS, fd_checkpoints=(28, 28), held_at_end=0, wakes=3,
        exit_code=0, left_running=[], judged_roles=ROLES,
    )  # fmt: skip
    args.update(kw)
    checks = judge(outcomes, series_by_process(samples), **args)  # type: ignore[arg-type]
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
