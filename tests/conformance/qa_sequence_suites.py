"""Triton's sequence-batcher QA suites as suites of tests.conformance.triton_qa, on models of
its own qa/common/gen_qa_sequence_models.py, gen_qa_implicit_models.py and
gen_qa_dyna_sequence_models.py (repositories: tests/fixtures/triton_qa_sequence_repos.py).

    L0_sequence_batcher  sequence_batcher_test.py: test.sh's NO_DELAY_TESTS (7) on each of
                         its MODEL_TRIALS (models0, 1, 2, 4, v), BACKENDS=onnx libtorch python,
                         ENSEMBLES=0, one server start per test and trial as test.sh; then
                         SequenceBatcherPreserveOrderingTest on sequence_py. Left out:
                         DELAY_TESTS and QUEUE_DELAY_TESTS (they need TRITONSERVER_DELAY_
                         SCHEDULER / _BACKLOG_DELAY_SCHEDULER, Triton's scheduler test hooks),
                         the ragged and request-timeout tests (Triton's C++ custom sequence
                         backend), the ensemble trials (`nop_*` steps: Triton's identity test
                         backend)
    L0_implicit_state    implicit_state.py's two tests on onnx/libtorch models (its other five
                         run Triton's C++ implicit-state test backend), then L0_sequence_batcher
                         as its test.sh runs it: IMPLICIT_STATE=1, BACKENDS=libtorch onnx (no
                         plan), ENSEMBLES=0, the NO_DELAY_TESTS on every MODEL_TRIAL
    L0_dyna_sequence_batcher  dyna_sequence_batcher_test.py's 9 tests as test.sh runs them
                         (NO_BATCHING=1 then 0, the repository edited between), BACKENDS=libtorch
                         onnx; left out: the custom / custom_string trials and the ragged run
                         (Triton's C++ custom_dyna_sequence_int32)
"""

from __future__ import annotations

from functools import partial

from tests.conformance.qa_suite import Run, Suite
from tests.fixtures.triton_qa_sequence_repos import (
    IMPLICIT_BACKENDS,
    SEQUENCE_BACKENDS,
    SEQUENCE_TRIALS,
    build_dyna_sequence_repo,
    build_implicit_state_repo,
    build_preserve_ordering_repo,
    build_sequence_repo,
)

__all__ = ["SEQUENCE_SUITES", "dyna_runs"]

# test.sh's NO_DELAY_TESTS: the tests that assert TRITONSERVER_DELAY_SCHEDULER and
# TRITONSERVER_BACKLOG_DELAY_SCHEDULER unset.
_NO_DELAY_TESTS = (
    "test_simple_sequence",
    "test_length1_sequence",
    "test_batch_size",
    "test_no_sequence_start",
    "test_no_sequence_start2",
    "test_no_sequence_end",
    "test_no_correlation_id",
)
# test.sh's SERVER_ARGS_EXTRA less `--backend-directory` and `--backend-config=tensorflow,...`
# (Triton's install; TensorFlow).
_SERVER_ARGS = ("--log-verbose=1",)


def _trial_env(trial: str, *, implicit: bool = False) -> tuple[tuple[str, str], ...]:
    """test.sh's exports for one MODEL_TRIAL (`implicit`: as L0_implicit_state runs it)."""
    instances = "1" if trial == "v" else ("4" if trial == "0" else trial)
    return (
        ("BACKENDS", " ".join(IMPLICIT_BACKENDS if implicit else SEQUENCE_BACKENDS)),
        ("ENSEMBLES", "0"),
        ("IMPLICIT_STATE", "1" if implicit else "0"),
        ("INITIAL_STATE_FILE", "0"),
        ("INITIAL_STATE_ZERO", "0"),
        ("NO_BATCHING", "1" if trial == "0" else "0"),
        ("MODEL_INSTANCES", instances),
        ("BATCHER_TYPE", "VARIABLE" if trial == "v" else "FIXED"),
    )


def _no_delay_runs(*, implicit: bool = False) -> list[Run]:
    return [
        Run(
            f"sequence_batcher_test.SequenceBatcherTest.{test}",
            f"models{trial}",
            _SERVER_ARGS,
            env=_trial_env(trial, implicit=implicit),
            label=f"models{trial}",
        )
        for trial in SEQUENCE_TRIALS
        for test in _NO_DELAY_TESTS
    ]


def _sequence_batcher_runs() -> tuple[Run, ...]:
    ordering = Run(
        "sequence_batcher_test.SequenceBatcherPreserveOrderingTest",
        "preserve_ordering_models",
        _SERVER_ARGS,
        env=_trial_env("1"),
    )
    return (*_no_delay_runs(), ordering)


def _implicit_state_runs() -> tuple[Run, ...]:
    """implicit_state.py on `models`, then L0_sequence_batcher's test.sh with
    IMPLICIT_STATE=1 (`cd ../L0_sequence_batcher && bash test.sh`), its preserve-ordering
    test needing `python` in BACKENDS (not there)."""
    # test.sh's --cuda-virtual-address-size is for growable_memory (a C++ test backend's).
    state = Run("implicit_state.ImplicitStateTest", "models", env=(("BACKENDS", "libtorch onnx"),))
    return (state, *_no_delay_runs(implicit=True))


def dyna_runs(*, implicit: bool = False) -> tuple[Run, ...]:
    """test.sh's two loops: NO_BATCHING=1 on `models`, then NO_BATCHING=0 on the edited ones;
    one server start per test. `implicit`: as L0_dyna_implicit_state runs it (IMPLICIT_STATE=1,
    its BACKENDS="onnx plan" less plan, ENSEMBLES=0)."""
    env: tuple[tuple[str, str], ...] = (
        (("BACKENDS", "onnx"), ("IMPLICIT_STATE", "1"), ("ENSEMBLES", "0"))
        if implicit
        else (("BACKENDS", " ".join(IMPLICIT_BACKENDS)), ("IMPLICIT_STATE", "0"))
    )
    return (
        *(
            Run(f"dyna_sequence_batcher_test.DynaSequenceBatcherTest.{test}", "models",
                env=(*env, ("NO_BATCHING", "1")))
            for test in ("test_simple_sequence", "test_length1_sequence")
        ),
        *(
            Run(f"dyna_sequence_batcher_test.DynaSequenceBatcherTest.{test}", "multi_models",
                env=(*env, ("NO_BATCHING", "0")))
            for test in _DYNA_MULTI_TESTS
        ),
    )  # fmt: skip


_DYNA_MULTI_TESTS = (
    "test_multi_sequence_different_shape",
    "test_multi_sequence",
    "test_multi_parallel_sequence",
    "test_backlog",
    "test_backlog_fill",
    "test_backlog_fill_no_end",
    "test_backlog_sequence_timeout",
)

_TRIAL_REPOS = {
    f"models{trial}": partial(build_sequence_repo, trial=trial) for trial in SEQUENCE_TRIALS
}
_CUSTOM_BACKEND = (
    "its model runs Triton's C++ implicit-state test backend (libtriton_implicit_state.so)"
)

SEQUENCE_SUITES = (
    Suite(
        "L0_sequence_batcher",
        ("sequence_batcher_test.py",),
        {**_TRIAL_REPOS, "preserve_ordering_models": build_preserve_ordering_repo},
        _sequence_batcher_runs(),
        beside=("qa/common/sequence_util.py",),
    ),
    Suite(
        "L0_implicit_state",
        ("implicit_state.py",),
        {
            "models": build_implicit_state_repo,
            **{
                f"models{trial}": partial(build_sequence_repo, trial=trial, implicit=True)
                for trial in SEQUENCE_TRIALS
            },
        },
        _implicit_state_runs(),
        deselect=tuple(
            (test, _CUSTOM_BACKEND)
            for test in (
                "test_no_implicit_state",
                "test_wrong_implicit_state_name",
                "test_implicit_state_single_buffer",
                "test_implicit_state_growable_memory",
                "test_no_update",
            )
        ),
        beside=("qa/L0_sequence_batcher/sequence_batcher_test.py", "qa/common/sequence_util.py"),
    ),
    Suite(
        "L0_dyna_sequence_batcher",
        ("dyna_sequence_batcher_test.py",),
        {
            "models": partial(build_dyna_sequence_repo, multi=False),
            "multi_models": partial(build_dyna_sequence_repo, multi=True),
        },
        dyna_runs(),
        beside=("qa/common/sequence_util.py",),
    ),
)
