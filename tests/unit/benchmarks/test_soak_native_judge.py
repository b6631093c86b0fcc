"""The serve-native soak's verdict (benchmarks/soak_native_judge.py): a failure is expected only
when its fault explains it (the documented answer, inside its window), and each invariant fails
on the data that breaks it."""

from __future__ import annotations

from benchmarks.soak_native_judge import Faults, Window, expected, judge_native
from benchmarks.soak_stats import Check, Outcome, ProcSample, Targets, series_by_process

TARGETS = Targets(
    warm_p99_factor=3.0,
    warm_p99_floor_s=0.05,
    waking_p99_s=0.0,
    rss_slope_bytes_per_min=1 << 20,
    fd_slope_per_min=1.0,
    fd_checkpoint_delta=2,
)
ROLES = frozenset({"server", "front"})
WINDOW = (10.0, 70.0)
UNLOADED = "[404] Request for unknown model: 'churn' has no available versions"
NOT_READY = "[StatusCode.UNAVAILABLE] model 'churn' is not ready"
KILLED = (
    "[500] Failed to process the request(s) for model 'kill_0_0', message: Stub process "
    "'kill_0_0' is not healthy."
)
FAULTS = Faults(
    unloads=(Window("churn", 20.0, 22.0),), kills=(Window("kill", 40.0, 40.5),),
    front_serves_churned=2,
)  # fmt: skip


def _churn(model: str, started: float, result: str, detail: str = "") -> Outcome:
    return Outcome("churn_http_json", model, "mixed", "churn", started, 0.01, result, detail)


def test_the_documented_answers_inside_their_windows_are_expected() -> None:
    rows = expected(
        [
            _churn("churn", 21.0, "error", UNLOADED),
            _churn("churn", 21.5, "lost", NOT_READY),
            _churn("kill", 39.995, "error", KILLED),  # in flight at the kill
            _churn("kill", 40.3, "error", KILLED),  # sent before the server saw it gone
        ],
        FAULTS,
    )
    assert [o.result for o in rows] == ["unloaded", "unloaded", "stub_killed", "stub_killed"]


def test_the_documented_answers_outside_their_windows_or_for_another_model_stay_failures() -> None:
    rows = expected(
        [
            _churn("churn", 25.0, "error", UNLOADED),  # loaded again by then
            _churn("kill", 21.0, "error", UNLOADED.replace("churn", "kill")),  # never unloaded
            _churn("kill", 45.0, "error", KILLED),  # the new stub was ready
            _churn("churn", 40.2, "error", KILLED),  # not the killed model
        ],
        FAULTS,
    )
    assert [o.result for o in rows] == ["error", "error", "error", "error"]


def test_any_other_failure_inside_a_window_stays_a_failure() -> None:
    rows = expected(
        [
            _churn("churn", 21.0, "lost", "ConnectionResetError: reset by peer"),
            _churn("churn", 21.0, "error", "[500] internal error"),
            _churn("kill", 40.1, "hung", "timed out " + KILLED),
            _churn("churn", 21.0, "wrong", "OUTPUT0: " + UNLOADED),
        ],
        FAULTS,
    )
    assert [o.result for o in rows] == ["lost", "error", "hung", "wrong"]


def _run(
    outcomes: list[Outcome] | None = None,
    *,
    faults: Faults = FAULTS,
    samples: list[ProcSample] | None = None,
    fds: dict[str, tuple[int, int]] | None = None,
    answered: dict[str, int] | None = None,
) -> list[Check]:
    rows = outcomes or []
    rows += [Outcome("http_json", "hot", "baseline", "warm", t, 0.002, "ok") for t in range(10)]
    rows += [Outcome("grpc", "hot", "mixed", "warm", 10 + t / 2, 0.003, "ok") for t in range(120)]
    rows += [_churn("churn", 30.0, "ok"), _churn("churn", 21.0, "error", UNLOADED)]
    rows += [Outcome("hostile:x", "hot", "mixed", "hostile", 30.0, 0.01, "refused")]
    if samples is None:
        samples = [
            ProcSample(float(t), pid, role, 100 << 20, 30)
            for t in range(0, 71)
            for pid, role in ((1, "server"), (2, "front"))
        ]
    return judge_native(
        expected(rows, faults),
        series_by_process(samples),
        faults=faults,
        window=WINDOW,
        targets=TARGETS,
        answered_by_front={"hot": 10} if answered is None else answered,
        hot=("hot",),
        fd_checkpoints={"server": (33, 33), "front": (21, 22)} if fds is None else fds,
        exit_code=0,
        left_running=[],
        judged_roles=ROLES,
    )


def _failed(checks: list[Check]) -> list[str]:
    return [c.name for c in checks if not c.held]


def test_a_clean_run_passes_every_check() -> None:
    assert _failed(_run()) == []


def test_a_lost_request_a_load_never_answered_or_no_kill_fails() -> None:
    lost = _failed(_run([_churn("hot", 30.0, "lost", "ConnectionResetError")]))
    assert lost == ["every good request answered 200 with the right output"]
    stuck = Faults((Window("churn", 20.0, None),), FAULTS.kills, 1)
    assert "the hot set changed under load (unload, load, the front takes it again)" in _failed(
        _run(faults=stuck)
    )
    unkilled = Faults(FAULTS.unloads, (), 2)
    assert _failed(_run(faults=unkilled)) == ["stubs killed and restarted"]


def test_the_front_not_taking_a_reloaded_model_or_a_hot_one_fails() -> None:
    not_retaken = Faults(FAULTS.unloads, FAULTS.kills, front_serves_churned=1)
    assert _failed(_run(faults=not_retaken)) == [
        "the hot set changed under load (unload, load, the front takes it again)"
    ]
    assert _failed(_run(answered={})) == ["the front answered the hot models itself"]


def test_fds_grown_at_the_quiet_checkpoint_or_along_the_window_fail() -> None:
    assert _failed(_run(fds={"server": (33, 36), "front": (21, 21)})) == [
        "server fds back at the quiet start count"
    ]
    leaking = [
        ProcSample(float(t), pid, role, 100 << 20, 30 + (t // 10 if role == "front" else 0))
        for t in range(0, 71)
        for pid, role in ((1, "server"), (2, "front"))
    ]
    assert _failed(_run(samples=leaking)) == ["fds flat: front pid 2"]
