"""Triton's QA suites about the model backends Thaw serves (ONNX, TorchScript, Python), on
models of Triton's own qa/common/gen_qa_*.py, as suites of tests.conformance.triton_qa.

    L0_infer_reshape    infer_reshape_test.py's 8 tests (one server start, as test.sh): every
                        framework's reshape models and the reshape ensembles; the
                        TensorFlow / TensorRT names and the ensembles' `nop_*` steps are
                        stand-ins (tests/fixtures/triton_qa_reshape_repos.py)
"""

from __future__ import annotations

from tests.conformance.qa_suite import Run, Suite
from tests.fixtures.triton_qa_reshape_repos import build_infer_reshape_repo

__all__ = ["BACKEND_SUITES"]

BACKEND_SUITES = (
    Suite(
        "L0_infer_reshape",
        ("infer_reshape_test.py",),
        {"models": build_infer_reshape_repo},
        (Run("infer_reshape_test", "models"),),
    ),
)
