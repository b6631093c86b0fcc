"""Triton's qa/L0_backend_python subtests that run on a CPU without conda, as suites of
tests.conformance.triton_qa (each subtest is a directory with its own test.sh; its tests import
`../../common`). Models: tests/fixtures/triton_qa_backend_python.py.

    L0_backend_python/model_control   model_control_test.py, --model-control-mode=explicit
    L0_backend_python/lifecycle       lifecycle_test.py on test.sh's first server run (its
                                      test_execute_cancel reads the server's log); then its
                                      three starts of a model whose initialize,
                                      auto_complete_config or finalize raises: the first two
                                      refused with the NameError in the log (with
                                      `--exit-on-error=true`, tritonserver's default: test.sh
                                      waits for the server to exit), the third started and
                                      stopped, the NameError in its log
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
    L0_backend_python/logging         test.sh's three starts (default; `log_verbose_level` 1;
                                      `log_info`/`_warning`/`_error` false), run by the suite
                                      itself: each start's POSTs to /v2/logging (a row each),
                                      logging_test.py under pytest, then, the server stopped,
                                      `verify_log_counts` on that start's log (a row); no
                                      `--backend-directory` (Thaw's Python backend needs none)
    L0_backend_python/request_rescheduling
                                      ../test_infer_shm_leak.py under pytest, MODEL_NAME
                                      bls_request_rescheduling (its model's unittest reschedules
                                      through BLS), then grpc_endpoint_test.py; explicit mode,
                                      `--load-model=*`; a server start each (test.sh shares
                                      one: each test loads again what it uses)
    L0_backend_python/bls             test.sh's CPU parts: tests.conformance.qa_bls
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.conformance.pytest_junit import run_pytest
from tests.conformance.qa_bls import BLS_SUITE
from tests.conformance.qa_checkout import Result, git_show
from tests.conformance.qa_servers import PORTS, start
from tests.conformance.qa_suite import Run, Suite, SuiteRun
from tests.fixtures.triton_qa_backend_python import (
    build_custom_metrics_repo,
    build_decoupled_repo,
    build_ensemble_repo,
    build_io_requested_output_repo,
    build_lifecycle_auto_complete_error_repo,
    build_lifecycle_fini_error_repo,
    build_lifecycle_init_error_repo,
    build_lifecycle_repo,
    build_logging_repo,
    build_model_control_repo,
    build_request_rescheduling_repo,
    build_response_sender_complete_final_repo,
    build_response_sender_repo,
)
from tests.fixtures.triton_qa_suite_repos import Mirror

__all__ = ["BACKEND_PYTHON_SUITES", "LOGGING_STARTS", "LogStart", "log_count_errors"]

CUDA = "its model puts tensors on a CUDA device (torch .cuda()): no GPU on this machine"
# test.sh's `--log-verbose=1` (lifecycle, response_sender, decoupled): their tests read the
# model's info lines in the server's log.
_VERBOSE = ("--log-verbose", "1")
_EXPLICIT_ALL = ("--model-control-mode", "explicit", "--load-model", "*")
PYTHON_BACKEND_REF = "r24.10"  # python_backend's branch of Triton 2.51.0
# tritonserver's default, which test.sh's starts of a model that cannot load rely on (it waits
# for the server to exit); Thaw's is false (the other models are served).
_EXIT_ON_ERROR = "--exit-on-error=true"


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


@dataclass(frozen=True)
class LogStart:
    """One server start of L0_backend_python/logging/test.sh: the settings it POSTs to
    /v2/logging once the server is up, then `pytest logging_test.py`, then, the server stopped,
    `verify_log_counts NON_VERBOSE VERBOSE` on that start's log."""

    label: str  # test.sh's SUBTEST
    posts: tuple[dict[str, object], ...]
    non_verbose: int
    verbose: int


LOGGING_STARTS = (
    LogStart("default", (), 4, 0),
    # initialize logs before the POST: 3 verbose lines (execute twice, finalize)
    LogStart("verbose", ({"log_verbose_level": 1},), 4, 3),
    # initialize logs before the POSTs: 1 line of each severity
    LogStart("disabled", ({"log_info": False}, {"log_warning": False}, {"log_error": False}), 1, 0),
)
_NON_VERBOSE_MSGS = ("Specific Msg!", "Info Msg!", "Warning Msg!", "Error Msg!")
_VERBOSE_MSG = "Verbose Msg!"


def log_count_errors(log: str, non_verbose: int, verbose: int) -> list[str]:
    """test.sh's verify_log_counts: `grep -c MSG $SERVER_LOG` (lines holding it) for each
    message; each count that differs from the expected one, in words."""
    lines = log.splitlines()
    expected = dict.fromkeys(_NON_VERBOSE_MSGS, non_verbose) | {_VERBOSE_MSG: verbose}
    wrong = []
    for text, want in expected.items():
        got = sum(text in line for line in lines)
        if got != want:
            wrong.append(f"{text!r}: {got} lines, expected {want}")
    return wrong


def _post_log_settings(settings: dict[str, object]) -> tuple[str, str]:
    """test.sh's `curl -d'{...}' localhost:8000/v2/logging`: passed on HTTP 200."""
    request = urllib.request.Request(
        f"http://localhost:{PORTS[0]}/v2/logging", data=json.dumps(settings).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return ("passed", "") if resp.status == 200 else ("failed", f"HTTP {resp.status}")
    except urllib.error.HTTPError as exc:
        return "failed", f"HTTP {exc.code}: {exc.read()[:200]!r}"
    except OSError as exc:
        return "failed", str(exc)


def _run_logging(run: SuiteRun) -> list[Result]:
    """L0_backend_python/logging/test.sh's three server starts, each with its rows: the POSTs,
    logging_test.py's test under pytest, and verify_log_counts judged on that start's log."""
    results: list[Result] = []

    def row(file: str, test: str, outcome: str, detail: str = "") -> None:
        results.append(Result(run.label, file, test, outcome, " ".join(detail.split())[:600]))

    for each in LOGGING_STARTS:
        tests = [f"POST /v2/logging {json.dumps(post)} [{each.label}]" for post in each.posts]
        counts = f"verify_log_counts {each.non_verbose} {each.verbose} [{each.label}]"
        try:
            server = start(run.kind, run.qa_dir / "models", ())
        except RuntimeError as exc:  # never became ready
            last = str(exc).strip().splitlines()[-1][:200]
            for test in (*tests, f"test_log_output [{each.label}]", counts):
                row("test.sh", test, "error", f"thaw {run.kind} did not start: {last}")
            continue
        try:
            for test, post in zip(tests, each.posts, strict=True):
                row("test.sh", test, *_post_log_settings(post))
            (run.qa_dir / "logging_test.junit.xml").unlink(missing_ok=True)
            rows = run_pytest(run.qa_dir, "logging_test.py", {})
        finally:
            rc = server.stop()  # test.sh's kill_server: finalize logs before the counts
        if rc != 0:
            print(f"warning: thaw {run.kind} exited {rc}; log: {server.log_path}", file=sys.stderr)
        for test_id, got in rows.items():
            name = f"{test_id.rsplit('.', 1)[-1]} [{each.label}]"
            row("logging_test.py", name, got["outcome"], got["detail"])
        wrong = log_count_errors(
            server.log_path.read_text(errors="replace"), each.non_verbose, each.verbose
        )
        row("test.sh", counts, "failed" if wrong else "passed", "; ".join(wrong))
        if wrong:
            print(f"{counts}: thaw {run.kind}'s log: {server.log_path}", file=sys.stderr)
    return results


def _fini_error(run: SuiteRun) -> list[Result]:
    """lifecycle/test.sh's fini_error start: started, stopped (finalize runs); its log holds
    the NameError finalize raised."""
    test = "fini_error: the log has finalize's NameError"
    try:
        server = start(run.kind, run.qa_dir / "models_fini_error", _VERBOSE)
    except RuntimeError as exc:
        last = str(exc).strip().splitlines()[-1][:200]
        return [Result(run.label, "test.sh", test, "failed", f"did not start: {last}")]
    server.stop()
    found = "name 'undefined_variable' is not defined" in server.log_path.read_text(
        errors="replace"
    )
    detail = "" if found else f"not in thaw {run.kind}'s log {server.log_path}"
    return [Result(run.label, "test.sh", test, "passed" if found else "failed", detail)]


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
        {
            "models": build_lifecycle_repo,
            "models_init_error": build_lifecycle_init_error_repo,
            "models_fini_error": build_lifecycle_fini_error_repo,
            "models_auto_complete_error": build_lifecycle_auto_complete_error_repo,
        },
        (
            Run("lifecycle_test", "models", _VERBOSE, server_log="lifecycle_server.log"),
            Run(
                "init_error: the start is refused",
                "models_init_error",
                (_EXIT_ON_ERROR, *_VERBOSE),
                refusal="name 'lorem_ipsum' is not defined",
            ),
            Run(
                "auto_complete_error: the start is refused",
                "models_auto_complete_error",
                (_EXIT_ON_ERROR, "--strict-model-config=false", *_VERBOSE),
                refusal="name 'undefined_variable' is not defined",
            ),
        ),
        runner=_fini_error,
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
    Suite(
        "L0_backend_python/request_rescheduling",
        ("grpc_endpoint_test.py",),
        {"models": build_request_rescheduling_repo},
        (
            Run(
                "test_infer_shm_leak",
                "models",
                (*_EXPLICIT_ALL, *_VERBOSE),
                env=(("MODEL_NAME", "bls_request_rescheduling"),),
                pytest=True,
            ),
            Run("grpc_endpoint_test", "models", (*_EXPLICIT_ALL, *_VERBOSE)),
        ),
        beside=("qa/L0_backend_python/test_infer_shm_leak.py",),
    ),
    Suite(
        "L0_backend_python/logging",
        ("logging_test.py",),
        {"models": build_logging_repo},
        (),
        runner=_run_logging,
    ),
    BLS_SUITE,
)
