"""tests.conformance.triton_qa's pure parts: which of Triton's tests run, how rows read."""

from __future__ import annotations

from tests.conformance.qa_checkout import Result
from tests.conformance.triton_qa import SUITES, Run, rows_to_results, select


def test_trace_tests_are_deselected_with_their_reason() -> None:
    ids = [
        "python_grpc_aio_test.TestGrpcAioClient.test_is_server_live",
        "python_grpc_aio_test.TestGrpcAioClient.test_register_system_shared_memory",
        "python_grpc_aio_test.TestGrpcAioClient.test_get_trace_settings",
    ]
    selected, dropped = select(ids, SUITES["L0_grpc"])
    assert selected == ids[:2]  # shared memory runs (docs/shared-memory.md)
    assert "trace" in dropped[ids[2]]


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
