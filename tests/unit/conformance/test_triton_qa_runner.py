"""tests.conformance.triton_qa's pure parts: which of Triton's tests run, how rows read."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conformance import triton_qa
from tests.conformance.pytest_junit import junit_rows
from tests.conformance.qa_backend_python import LOGGING_STARTS, log_count_errors
from tests.conformance.qa_checkout import Result
from tests.conformance.qa_l0_lifecycle import LEFT_OUT
from tests.conformance.qa_servers import first_unknown
from tests.conformance.triton_qa import SUITES, Run, apply_edits, rows_to_results, select


def test_trace_and_shared_memory_tests_of_l0_grpc_run() -> None:
    ids = [
        "python_grpc_aio_test.TestGrpcAioClient.test_is_server_live",
        "python_grpc_aio_test.TestGrpcAioClient.test_register_system_shared_memory",
        "python_grpc_aio_test.TestGrpcAioClient.test_get_trace_settings",
    ]
    # Shared memory (docs/shared-memory.md) and trace settings (docs/logging-and-tracing.md).
    assert select(ids, SUITES["L0_grpc"]) == (ids, {})


def test_a_needle_ending_in_dollar_deselects_only_the_test_of_that_exact_name() -> None:
    ids = [
        "decoupled_test.DecoupledTest.test_decoupled_bls",
        "decoupled_test.DecoupledTest.test_decoupled_bls_stream",
    ]
    selected, dropped = select(ids, SUITES["L0_backend_python/decoupled"])
    assert selected == ids[1:]
    assert "CUDA" in dropped[ids[0]]


def test_a_suite_without_deselections_runs_every_listed_test() -> None:
    ids = ["parameters_test.InferenceParametersTest.test_grpc_parameter"]
    assert select(ids, SUITES["L0_parameters"]) == (ids, {})


def test_parameters_runs_once_per_test_header_with_its_forward_flags() -> None:
    runs = {run.label: run for run in SUITES["L0_parameters"].runs}
    assert set(runs) == {
        "test_params",
        "test_headers",
        "test_header_forward_pattern_case_insensitive",
        "test_grpc_header_forward_pattern_case_sensitive",
    }
    assert runs["test_params"].serve_args == ()
    assert dict(runs["test_headers"].env) == {"TEST_HEADER": "test_headers"}
    assert "(?-i)MY_HEADER.*" in runs["test_grpc_header_forward_pattern_case_sensitive"].serve_args


def test_rows_read_as_results_named_by_test_and_run() -> None:
    run = Run("parameters_test", "model_repository", label="test_headers")
    rows = {
        "parameters_test.InferenceParametersTest.test_http_parameter": {
            "outcome": "failed",
            "detail": "AssertionError:\n  one   two",
        }
    }
    assert rows_to_results("v2.51.0", run, rows) == [
        Result(
            "v2.51.0",
            "parameters_test.py",
            "test_http_parameter [test_headers]",
            "failed",
            "AssertionError: one two",
        )
    ]


def test_large_payload_runs_only_when_asked() -> None:
    ids = ["large_payload_test.LargePayLoadTest.test_onnx"]
    suite = SUITES["L0_large_payload"]
    selected, dropped = select(ids, suite)
    assert selected == [] and "--with-large" in dropped[ids[0]]
    assert select(ids, suite, with_large=True) == (ids, {})


def test_a_flag_the_target_lacks_is_named_never_dropped() -> None:
    known = frozenset({"--port", "--grpc-restricted-protocol"})
    assert first_unknown(("--grpc-restricted-protocol=health:k=v",), known) is None
    assert first_unknown(("--port", "8000"), known) is None  # values are not flags
    args = ("--port", "8000", "--http-header-forward-pattern", "my_header.*")
    assert first_unknown(args, known) == "--http-header-forward-pattern"


def test_a_junit_report_reads_as_one_row_per_test_with_its_reason() -> None:
    report = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
      <testcase classname="test_infer_shm_leak.TestInferShmLeak" name="test_shm_leak"/>
      <testcase classname="m.C" name="test_fails">
        <failure message="assert 0 == 1">tb</failure></testcase>
      <testcase classname="m.C" name="test_errs"><error message="boom">tb</error></testcase>
      <testcase classname="m.C" name="test_skips"><skipped message="not here"/></testcase>
    </testsuite></testsuites>"""
    assert junit_rows(report) == {
        "test_infer_shm_leak.TestInferShmLeak.test_shm_leak": {"outcome": "passed", "detail": ""},
        "m.C.test_fails": {"outcome": "failed", "detail": "assert 0 == 1"},
        "m.C.test_errs": {"outcome": "error", "detail": "boom"},
        "m.C.test_skips": {"outcome": "skipped", "detail": "not here"},
    }


def test_l0_lifecycle_runs_or_names_the_reason_for_each_of_its_46_tests() -> None:
    run_tests = {run.target.rsplit(".", 1)[-1] for run in SUITES["L0_lifecycle"].runs}
    left_out = {name for name in LEFT_OUT if name.startswith("test_")}
    assert not run_tests & left_out
    assert len(run_tests | left_out) == 46  # lifecycle_test.py's tests at v2.51.0
    noexit = [run for run in SUITES["L0_lifecycle"].runs if "noexit" in run.target]
    # test.sh's run_server_nowait: the server is neither live nor ready, so no wait for it
    assert len(noexit) == 4 and not any(run.ready for run in noexit)
    assert all("--exit-on-error=false" in run.serve_args for run in noexit)


def test_l0_model_update_makes_test_sh_s_three_rate_limit_starts() -> None:
    suite = SUITES["L0_model_update"]
    flags = [tuple(a for a in run.serve_args if a.startswith("--rate-limit")) for run in suite.runs]
    assert flags == [
        ("--rate-limit=off",),
        ("--rate-limit=execution_count",),
        ("--rate-limit=execution_count", "--rate-limit-resource=R1:10"),
    ]
    for run in suite.runs:
        mode = run.label.removeprefix("rate_limit_")
        assert "--model-control-mode=explicit" in run.serve_args
        assert "--log-verbose=2" in run.serve_args
        assert ("RATE_LIMIT_MODE", mode) in run.env
        assert ("MODEL_LOG_DIR", "{qa_dir}") in run.env and ("MODEL_LOG_DIR", "{qa_dir}") in (
            run.server_env
        )
        assert run.server_log == f"instance_update_test.rate_limit_{mode}.server.log"
        assert run.link == "models" and run.repo == f"models_{mode}"
    # v2.51.0's tearDown needs Python 3.10; v2.53.0's file differs in that alone.
    assert suite.files_ref == "v2.53.0"
    gpu = "instance_update_test.TestInstanceUpdate.test_gpu_instance_update"
    cpu = "instance_update_test.TestInstanceUpdate.test_cpu_instance_update"
    selected, dropped = select([gpu, cpu], suite)
    assert selected == [cpu] and "KIND_GPU" in dropped[gpu]


def test_l0_backend_python_logging_makes_test_sh_s_three_starts_and_counts_after_each() -> None:
    suite = SUITES["L0_backend_python/logging"]
    assert suite.runner is not None and suite.runs == ()
    assert suite.files == ("logging_test.py",) and list(suite.repos) == ["models"]
    assert [(s.label, s.posts, s.non_verbose, s.verbose) for s in LOGGING_STARTS] == [
        ("default", (), 4, 0),
        ("verbose", ({"log_verbose_level": 1},), 4, 3),
        ("disabled", ({"log_info": False}, {"log_warning": False}, {"log_error": False}), 1, 0),
    ]


def test_verify_log_counts_counts_lines_holding_each_message() -> None:
    severities = ("Specific", "Info", "Warning", "Error")
    lines = [f"I model: {where}-{s} Msg!" for where in ("Init", "Exec") for s in severities]
    log = "\n".join([*lines, "D model: Exec-Verbose Msg!", "unrelated"])
    assert log_count_errors(log, 2, 1) == []
    assert log_count_errors(log, 2, 0) == ["'Verbose Msg!': 1 lines, expected 0"]
    assert len(log_count_errors(log, 1, 1)) == 4


def test_an_edit_changes_the_extracted_test_and_one_whose_text_is_gone_stops_the_run(
    tmp_path: Path,
) -> None:
    (tmp_path / "nan_inf_test.py").write_text("x = np.NINF\n")
    apply_edits(tmp_path, (("nan_inf_test.py", "np.NINF", "-np.inf"),))
    assert (tmp_path / "nan_inf_test.py").read_text() == "x = -np.inf\n"
    with pytest.raises(SystemExit, match=r"has no .np\.NINF. to change"):
        apply_edits(tmp_path, (("nan_inf_test.py", "np.NINF", "-np.inf"),))


def test_the_more_suites_are_registered_with_their_runs() -> None:
    for name in ("L0_optional_input", "L0_model_queue", "L0_request_cancellation"):
        assert SUITES[name].runs
    assert SUITES["L0_server_status"].runner is not None
    assert len(SUITES["L0_optional_input"].runs) == 10  # one server start per test


def test_a_script_past_its_time_is_a_failed_row_not_the_end_of_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Through `thaw up`, a lost shutdown signal once held cleanup_test.py for 600 s; the
    # TimeoutExpired ended the whole run and lost every suite's rows.
    (tmp_path / "hangs.py").write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr(triton_qa, "_SCRIPT_TIMEOUT_S", 0.5)
    run = SimpleNamespace(file="hangs.py", script_args=(), target="hangs")
    rows = triton_qa._script(tmp_path, run, {})  # type: ignore[arg-type]
    assert rows == {"hangs": {"outcome": "failed", "detail": "timed out after 0 s (killed)"}}
