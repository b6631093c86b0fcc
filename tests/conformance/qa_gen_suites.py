"""Triton's QA suites whose models come from Triton's data directory, made on the fly by its
own qa/common/gen_qa_*.py (tests/fixtures/triton_qa_gen.py), as suites of
tests.conformance.triton_qa. Repositories: tests/fixtures/triton_qa_gen_repos.py.

    L0_client_nobatch   client_test.py (batching / non-batching requests and models)
    L0_decoupled        decoupled_test.py's "python" trial: one server start per test, as
                        test.sh runs one client per test (test_one_to_multi_many with
                        TRITONSERVER_DELAY_GRPC_RESPONSE set, which the others assert unset),
                        then NonDecoupledTest on `non_decoupled_models`. Its "custom" trial runs
                        the same tests on Triton's C++ `repeat`/`square` test backends: left out
    L0_batcher          batcher_test.py's NO_DELAY_TESTS on `models` (FIXED) and `var_models`
                        (VARIABLE), BACKENDS=onnx libtorch python, one server start per test;
                        the tests needing TRITONSERVER_DELAY_SCHEDULER (Triton's scheduler
                        test hook), the different-shape (custom / ragged) and trace ones are
                        left out. test.sh's `--backend-directory` / `--backend-config=
                        tensorflow,...` are not passed (Triton's install and TensorFlow only)
"""

from __future__ import annotations

from tests.conformance.qa_suite import Run, Suite
from tests.fixtures.triton_qa_batcher_repos import (
    BATCHER_BACKENDS,
    build_batcher_fixed_repo,
    build_batcher_variable_repo,
)
from tests.fixtures.triton_qa_gen_repos import (
    build_client_nobatch_repo,
    build_decoupled_python_repo,
    build_non_decoupled_repo,
)

__all__ = ["GEN_SUITES"]

_DECOUPLED_TESTS = (
    "test_one_to_none",
    "test_one_to_one",
    "test_one_to_many",
    "test_no_streaming",
    "test_response_order",
    "test_wrong_shape",
)


def _decoupled_runs() -> tuple[Run, ...]:
    runs = [Run(f"decoupled_test.DecoupledTest.{t}", "python_models") for t in _DECOUPLED_TESTS]
    runs.append(
        Run(
            "decoupled_test.DecoupledTest.test_one_to_multi_many",
            "python_models",
            env=(("TRITONSERVER_DELAY_GRPC_RESPONSE", "2000"),),
        )
    )
    runs.append(Run("decoupled_test.NonDecoupledTest", "non_decoupled_models"))
    return tuple(runs)


# test.sh's NO_DELAY_TESTS: the batcher tests that need no TRITONSERVER_DELAY_SCHEDULER (a
# test hook of Triton's server that holds its scheduler until N requests are queued).
_BATCHER_TESTS = (
    "test_static_batch_preferred",
    "test_static_batch_lt_any_preferred",
    "test_static_batch_not_preferred",
    "test_static_batch_gt_max_preferred",
    "test_multi_batch_not_preferred",
    "test_multi_batch_gt_max_preferred",
    "test_multi_batch_sum_gt_max_preferred",
    "test_multi_same_output0",
    "test_multi_same_output1",
    "test_multi_different_outputs",
    "test_multi_different_output_order",
)


def _batcher_runs() -> tuple[Run, ...]:
    """One server start per test and model type, as test.sh does (the tests read the model's
    execution counts)."""
    return tuple(
        Run(
            f"batcher_test.BatcherTest.{test}",
            repo,
            env=(("BACKENDS", " ".join(BATCHER_BACKENDS)), ("BATCHER_TYPE", kind)),
            label=kind,
        )
        for kind, repo in (("FIXED", "models"), ("VARIABLE", "var_models"))
        for test in _BATCHER_TESTS
    )


GEN_SUITES = (
    Suite(
        "L0_client_nobatch",
        ("client_test.py",),
        {"qa_model_repository": build_client_nobatch_repo},
        (Run("client_test", "qa_model_repository"),),
    ),
    Suite(
        "L0_decoupled",
        ("decoupled_test.py",),
        {
            "python_models": lambda repo, mirror: build_decoupled_python_repo(repo, mirror),
            "non_decoupled_models": build_non_decoupled_repo,
        },
        _decoupled_runs(),
    ),
    Suite(
        "L0_batcher",
        ("batcher_test.py",),
        {"models": build_batcher_fixed_repo, "var_models": build_batcher_variable_repo},
        _batcher_runs(),
    ),
)
