"""The serve-native soak's verdict (benchmarks/soak_native.py): which failed answers the churn
made expected, and the invariants of a run. Pure: no clock, no processes, no network.

Two faults are made on purpose while traffic runs, each leaving a `Window` of time:

    unload ─────────────── load answered       a request to the churned model that starts
    │  "Request for unknown model: 'm' has     inside gets the documented refusal of a model
    │   no available versions" (404/NOT_FOUND) not loaded (thawwire.model_control): expected
    │  "model 'm' is not ready" (503/UNAVAILABLE)
    kill (SIGKILL) ─────── new stub ready       a request to the killed model in flight at the
       "Stub process '<instance>' is not       kill, or sent before the server saw the stub
        healthy." (500/INTERNAL)               gone, fails so (docs/python-models.md): expected

Any other failure of a good request stays what soak_traffic made it (error, wrong, lost, hung)
and fails the run: the documented answer outside its window, a 5xx that is not it, a reset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from benchmarks.soak_stats import (
    Check,
    Outcome,
    Series,
    Targets,
    flat_checks,
    good_check,
    hostile_check,
    hung_check,
    long_lived,
    warm_p99_check,
)
from thawwire.model_control import no_available_versions, not_ready

__all__ = ["EXPECTED_RESULTS", "Faults", "Window", "expected", "judge_native"]

UNLOADED = "unloaded"  # the documented refusal of a request to a model not loaded
STUB_KILLED = "stub_killed"  # the documented failure of a request its stub died under
EXPECTED_RESULTS = (UNLOADED, STUB_KILLED)
_STUB_DIED = "is not healthy."


@dataclass(frozen=True)
class Window:
    """A fault of `model` from `start_s` to `end_s` (None: it never ended), soak seconds."""

    model: str
    start_s: float
    end_s: float | None

    def overlaps(self, o: Outcome) -> bool:
        """Whether request `o` started before the window ended and ended after it began."""
        end = float("inf") if self.end_s is None else self.end_s
        return o.started_s <= end and o.started_s + o.latency_s >= self.start_s


@dataclass(frozen=True)
class Faults:
    """The faults of one run: each unload until its model's load was answered, each stub
    kill until the server's next stub for that model was ready; and how often the server
    told the front to answer the churned model itself (once at start, once per load)."""

    unloads: tuple[Window, ...]
    kills: tuple[Window, ...]
    front_serves_churned: int


def _unloaded_answer(o: Outcome) -> bool:
    return no_available_versions(o.model) in o.detail or not_ready(o.model) in o.detail


def expected(outcomes: Sequence[Outcome], faults: Faults) -> list[Outcome]:
    """`outcomes`, with each failure that a fault explains given its expected result."""
    out = []
    for o in outcomes:
        if o.kind != "hostile" and o.result in ("error", "lost"):
            if _unloaded_answer(o) and any(
                w.model == o.model and w.overlaps(o) for w in faults.unloads
            ):
                o = replace(o, result=UNLOADED)
            elif _STUB_DIED in o.detail and any(
                w.model == o.model and w.overlaps(o) for w in faults.kills
            ):
                o = replace(o, result=STUB_KILLED)
        out.append(o)
    return out


def _fault_checks(outcomes: Sequence[Outcome], faults: Faults) -> list[Check]:
    churn = [o for o in outcomes if o.kind == "churn"]
    ok_after_fault = sum(1 for o in churn if o.result == "ok")
    unended = [w for w in (*faults.unloads, *faults.kills) if w.end_s is None]
    return [
        Check(
            "the hot set changed under load (unload, load, the front takes it again)",
            bool(faults.unloads)
            and not unended
            and faults.front_serves_churned >= len(faults.unloads) + 1,
            f"{len(faults.unloads)} unload/load cycles; the front told to answer the churned "
            f"model {faults.front_serves_churned} times",
            "> 0 cycles, each load answered, told at start and again at each load",
        ),
        Check(
            "stubs killed and restarted",
            bool(faults.kills) and not unended,
            f"{len(faults.kills)} SIGKILLs, "
            f"{sum(1 for w in faults.kills if w.end_s is not None)} stubs ready again",
            "> 0, each followed by a new stub",
        ),
        Check(
            "the churned and killed models answered between their faults",
            ok_after_fault > 0,
            f"{ok_after_fault} of {len(churn)} ok "
            f"({sum(1 for o in churn if o.result == UNLOADED)} {UNLOADED}, "
            f"{sum(1 for o in churn if o.result == STUB_KILLED)} {STUB_KILLED})",
            "> 0 ok",
        ),
    ]


def _hot_path_check(answered_by_front: dict[str, int], hot: Sequence[str]) -> Check:
    return Check(
        "the front answered the hot models itself",
        all(answered_by_front.get(m, 0) > 0 for m in hot),
        ", ".join(f"{m} {answered_by_front.get(m, 0)}" for m in hot),
        "> 0 each (thaw_native_front_answered_total)",
    )


def judge_native(
    outcomes: Sequence[Outcome],
    series: Sequence[Series],
    *,
    faults: Faults,
    window: tuple[float, float],
    targets: Targets,
    answered_by_front: dict[str, int],
    hot: Sequence[str],
    fd_checkpoints: dict[str, tuple[int, int]],
    exit_code: int | None,
    left_running: Sequence[int],
    judged_roles: frozenset[str],
) -> list[Check]:
    """Every invariant of the serve-native soak as a Check; `outcomes` already passed
    through `expected()`. The server's and the front's fds are judged at a fixed number of
    live processes (soak_stats.fd_growth: each stub costs both a few fds while it lives, and
    the churn and the kills make stubs come and go); a steady model's stub by its plain slope."""
    checks = [hung_check(outcomes), good_check(outcomes), *_fault_checks(outcomes, faults)]
    checks += [
        _hot_path_check(answered_by_front, hot),
        hostile_check(outcomes),
        warm_p99_check(outcomes, targets),
    ]
    lived = [
        s for s in long_lived(series, window, targets.long_lived_fraction) if s.role in judged_roles
    ]
    roles = {s.role for s in lived}
    checks.append(
        Check(
            "every judged process sampled over the steady window",
            judged_roles <= roles,
            ", ".join(sorted(roles)) or "none",
            ", ".join(sorted(judged_roles)),
        )
    )
    for s in lived:
        checks += flat_checks(s, series, window, targets, by_live={"server", "front"})
    for role in ("server", "front"):
        start_end = fd_checkpoints.get(role)
        checks.append(
            Check(
                f"{role} fds back at the quiet start count",
                start_end is not None
                and start_end[1] - start_end[0] <= targets.fd_checkpoint_delta,
                "not reached" if start_end is None else f"{start_end[0]} -> {start_end[1]}",
                f"end - start <= {targets.fd_checkpoint_delta}",
            )
        )
    checks.append(
        Check(
            "thaw serve stopped cleanly, nothing left running",
            exit_code == 0 and not left_running,
            f"exit {exit_code}, left running: {list(left_running) or 'none'}",
            "exit 0, none",
        )
    )
    return checks
