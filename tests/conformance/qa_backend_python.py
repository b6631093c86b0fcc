"""Triton's qa/L0_backend_python subtests that run on a CPU without conda, as suites of
tests.conformance.triton_qa (each subtest is a directory with its own test.sh; its tests import
`../../common`). Models: tests/fixtures/triton_qa_backend_python.py.

    L0_backend_python/model_control   model_control_test.py, --model-control-mode=explicit
    L0_backend_python/lifecycle       lifecycle_test.py on test.sh's first server run (its
                                      test_execute_cancel reads the server's log)
    L0_backend_python/ensemble        ensemble_test.py; test_ensemble_gpu deselected (CUDA)
    L0_backend_python/response_sender response_sender_test.py, then
                                      response_sender_complete_final_test.py (two server runs)
    L0_backend_python/custom_metrics  ../test_infer_shm_leak.py under pytest, MODEL_NAME
                                      custom_metrics (the model runs its own unittest of the
                                      metrics API against the server's metrics port)
    L0_backend_python/io              io_test.py's test_requested_output_*; the rest (and the
                                      decoupled one, whose model puts outputs on CUDA at random)
                                      deselected
    L0_backend_python/decoupled       decoupled_test.py; test_decoupled_bls deselected (its model
                                      runs a GPU BLS test first); square_int32 is python_backend's
                                      example, read from `$TRITON_PYTHON_BACKEND_MIRROR` at
                                      PYTHON_BACKEND_REF (without it, the test that uses it fails)
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.conformance.qa_checkout import git_show
from tests.conformance.qa_suite import Run, Suite
from tests.fixtures.triton_qa_backend_python import (
    build_custom_metrics_repo,
    build_decoupled_repo,
    build_ensemble_repo,
    build_io_requested_output_repo,
    build_lifecycle_repo,
    build_model_control_repo,
    build_response_sender_complete_final_repo,
    build_response_sender_repo,
)
from tests.fixtures.triton_qa_suite_repos import Mirror

__all__ = ["BACKEND_PYTHON_SUITES"]

CUDA = "its model puts tensors on a CUDA device (torch .cuda()): no GPU on this machine"
# test.sh's `--log-verbose=1` (lifecycle, response_sender, decoupled): their tests read the
# model's info lines in the server's log.
_VERBOSE = ("--log-verbose", "1")
PYTHON_BACKEND_REF = "r24.10"  # python_backend's branch of Triton 2.51.0


def python_backend_mirror() -> Mirror | None:
    """python_backend's files at PYTHON_BACKEND_REF, from `$TRITON_PYTHON_BACKEND_MIRROR` (a
    bare git dir), or None without one."""
    where = os.environ.get("TRITON_PYTHON_BACKEND_MIRROR", "")
    if not where:
        return None

    def read(path: str) -> bytes:
        content = git_show(Path(where), PYTHON_BACKEND_REF, path)
        if content is None:
            raise SystemExit(f"{PYTHON_BACKEND_REF}:{path} is not in {where}")
        return content

    return Mirror(read)


def _decoupled_repo(repo: Path, mirror: Mirror) -> Path:
    return build_decoupled_repo(repo, mirror, python_backend_mirror())


BACKEND_PYTHON_SUITES = (
    Suite(
        "L0_backend_python/model_control",
        ("model_control_test.py",),
        {"models": build_model_control_repo},
        (Run("model_control_test", "models", ("--model-control-mode", "explicit")),),
    ),
    Suite(
        "L0_backend_python/lifecycle",
        ("lifecycle_test.py",),
        {"models": build_lifecycle_repo},
        (Run("lifecycle_test", "models", _VERBOSE, server_log="lifecycle_server.log"),),
    ),
    Suite(
        "L0_backend_python/ensemble",
        ("ensemble_test.py",),
        {"models": build_ensemble_repo},
        (Run("ensemble_test", "models", server_log="ensemble_server.log"),),
        deselect=(("test_ensemble_gpu", CUDA),),
    ),
    Suite(
        "L0_backend_python/io",
        ("io_test.py",),
        {"models": build_io_requested_output_repo},
        (Run("io_test", "models", server_log="io_server.log"),),
        deselect=(
            ("test_ensemble_io", CUDA),
            ("test_empty_gpu_output", CUDA),
            ("test_variable_gpu_output", CUDA),
            ("test_requested_output_decoupled", CUDA),
        ),
    ),
    Suite(
        "L0_backend_python/response_sender",
        ("response_sender_test.py", "response_sender_complete_final_test.py"),
        {
            "models": build_response_sender_repo,
            "models_complete_final": build_response_sender_complete_final_repo,
        },
        tuple(
            Run(test, repo, _VERBOSE, env=(("SERVER_LOG", log),), server_log=log)
            for test, repo, log in (
                ("response_sender_test", "models", "response_sender_test.server.log"),
                (
                    "response_sender_complete_final_test",
                    "models_complete_final",
                    "response_sender_complete_final_test.server.log",
                ),
            )
        ),
    ),
    Suite(
        "L0_backend_python/custom_metrics",
        (),
        {"models": build_custom_metrics_repo},
        (
            Run(
                "test_infer_shm_leak",
                "models",
                env=(("MODEL_NAME", "custom_metrics"),),
                pytest=True,
            ),
        ),
        beside=("qa/L0_backend_python/test_infer_shm_leak.py",),
    ),
    Suite(
        "L0_backend_python/decoupled",
        ("decoupled_test.py",),
        {"models": _decoupled_repo},
        (Run("decoupled_test", "models", _VERBOSE, server_log="decoupled_server.log"),),
        deselect=(("test_decoupled_bls$", CUDA),),
    ),
)
