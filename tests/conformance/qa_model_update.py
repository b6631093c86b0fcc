"""Triton's qa/L0_model_update as a suite of tests.conformance.triton_qa: test.sh's three server
starts, one per rate-limit mode, each running instance_update_test.py unchanged against a fresh
model_init_del repository (tests/fixtures/triton_qa_model_update_repos.py).

    rate_limit_off                       --rate-limit=off
    rate_limit_execution_count           --rate-limit=execution_count
    rate_limit_execution_count_with_explicit_resource
                                         --rate-limit=execution_count --rate-limit-resource=R1:10

Each start also gives `--model-control-mode=explicit --log-verbose=2`; test.sh exports
MODEL_LOG_DIR (its `pwd`, where model_init_del counts its initialize and finalize calls) to the
server and the test, and RATE_LIMIT_MODE to the test. The test edits `models/model_init_del`
and reads the server's log as `instance_update_test.rate_limit_<mode>.server.log`, both in its
own directory. instance_update_test.py is v2.53.0's: v2.51.0's tearDown needs Python 3.10
(`_feedErrorsToResult`), and that is all the two differ in.
"""

from __future__ import annotations

from tests.conformance.qa_suite import Run, Suite
from tests.fixtures.triton_qa_model_update_repos import build_model_init_del_repo

__all__ = ["L0_MODEL_UPDATE", "LEFT_OUT"]

_TEST = "instance_update_test"
_MODES = {
    "off": ("--rate-limit=off",),
    "execution_count": ("--rate-limit=execution_count",),
    "execution_count_with_explicit_resource": (
        "--rate-limit=execution_count",
        "--rate-limit-resource=R1:10",
    ),
}
_GPU = "loads KIND_GPU instances (no GPU here)"
_DESELECT = (
    ("test_gpu_instance_update", _GPU),
    ("test_gpu_cpu_instance_update", _GPU),
    ("test_instance_name_update", _GPU),
    ("test_instance_signature", _GPU),
    ("test_direct_scheduler_update_with_ongoing_sequences", _GPU),
    ("test_oldest_scheduler_update_with_ongoing_sequences", _GPU),
)
LEFT_OUT: dict[str, str] = {
    **dict(_DESELECT),
    "test.sh: grep 'Should not print this' in the server's log": "no model of this suite "
    "prints it (model_init_del has no such line); not checked",
}


def _run(mode: str, rate_args: tuple[str, ...]) -> Run:
    log = f"instance_update_test.rate_limit_{mode}.server.log"
    common = (("MODEL_LOG_DIR", "{qa_dir}"), ("PYTHONDONTWRITEBYTECODE", "True"))
    return Run(
        _TEST,
        f"models_{mode}",
        (
            "--model-control-mode=explicit",
            *rate_args,
            "--log-verbose=2",
        ),
        env=(*common, ("RATE_LIMIT_MODE", mode)),
        server_env=common,
        label=f"rate_limit_{mode}",
        server_log=log,
        link="models",
    )


L0_MODEL_UPDATE = Suite(
    "L0_model_update",
    ("instance_update_test.py",),
    {f"models_{mode}": build_model_init_del_repo for mode in _MODES},
    tuple(_run(mode, args) for mode, args in _MODES.items()),
    deselect=_DESELECT,
    # v2.51.0's tearDown calls unittest's `_feedErrorsToResult`, which Python 3.11 removed, so
    # every test errors there; v2.53.0's reads `self._outcome.result` instead, its only change.
    files_ref="v2.53.0",
)
