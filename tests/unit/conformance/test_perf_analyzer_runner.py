"""The pure parts of tests/conformance/perf_analyzer_runs.py: a run's verdict from perf_analyzer's
exit status and output, its CSV check, the results table, the case list's consistency with the
model repository, and the exit 0 where perf_analyzer is not prepared."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance import perf_analyzer_runs
from tests.conformance.client_example_results import Outcome
from tests.conformance.perf_analyzer_cases import CASES
from tests.conformance.perf_analyzer_runs import _csv_rows, main, results_table, verdict
from tests.fixtures.perf_analyzer_models import write_repository

_PASSED = """*** Measurement Settings ***
Request concurrency: 1
  Client:
    Request count: 3098
Inferences/Second vs. Client Average Batch Latency
Concurrency: 1, throughput: 1712.3 infer/sec, latency 580 usec
"""
_THREAD_ERROR = """Request concurrency: 1
Failed to maintain requested inference load. Worker thread(s) failed to generate requests.
Thread [0] had error: Failed to process the request(s) for model 'simple_string_0'
"""


def test_a_run_passes_on_exit_0_with_a_throughput_line() -> None:
    assert verdict(0, _PASSED).outcome == "passed"
    rate = "Request Rate: 100, throughput: 99.8 infer/sec, latency 919 usec\n"
    assert verdict(0, rate).outcome == "passed"


def test_a_run_fails_on_a_request_error_even_when_it_exits_0() -> None:
    outcome = verdict(0, _THREAD_ERROR)
    assert outcome.outcome == "failed"
    assert "Failed to maintain" in outcome.detail


def test_a_run_without_a_throughput_line_fails_unless_periodic() -> None:
    assert verdict(0, "Request concurrency: 1\n").outcome == "failed"
    assert verdict(0, "Request concurrency: 1\n", periodic=True).outcome == "passed"


def test_the_metrics_warnings_are_reported_beside_a_pass() -> None:
    out = "WARNING: Unable to parse 'nv_gpu_utilization' metric.\n" + _PASSED
    outcome = verdict(0, out)
    assert outcome.outcome == "passed"
    assert "nv_gpu_utilization" in outcome.detail


def test_a_refused_run_passes_with_the_servers_words() -> None:
    out = "error: failed to get model metadata: Request for unknown model: 'x' is not found\n"
    outcome = verdict(99, out, refused=True)
    assert outcome.outcome == "passed"
    assert "unknown model: 'x' is not found" in outcome.detail
    assert verdict(0, _PASSED, refused=True).outcome == "failed"


def test_the_csv_must_be_perf_analyzers(tmp_path: Path) -> None:
    path = tmp_path / "out.csv"
    assert _csv_rows(path) == "wrote no CSV"
    path.write_text("Concurrency,Inferences/Second\n1,1683.82\n")
    assert _csv_rows(path) is None
    path.write_text("Concurrency,Inferences/Second\n")
    assert _csv_rows(path) is not None
    assert verdict(0, _PASSED, "wrote no CSV") == Outcome("failed", "wrote no CSV", _PASSED)


def test_the_table_has_a_column_per_target_and_the_notes() -> None:
    case = CASES[0]
    table = results_table(
        (case,),
        {
            "serve": {case.name: Outcome("passed", "")},
            "triton": {case.name: Outcome("failed", "x")},
        },
    )
    assert "| thaw serve | Triton 2.51 | note |" in table
    assert f"| `{case.name}` | passed | failed | triton: x |" in table


def test_every_case_names_a_model_of_the_repository(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models")
    models = {p.name for p in repo.iterdir()}
    assert {
        "simple",
        "simple_string",
        "simple_sequence",
        "repeat_int32",
        "simple_batched",
    } <= models
    assert {"1", "2"} <= {p.name for p in (repo / "onnx_add").iterdir()}
    assert "dynamic_batching" in (repo / "simple_batched" / "config.pbtxt").read_text()
    for case in CASES:
        assert case.protocol in ("http", "grpc"), case.name
        assert case.model in models or case.refused, case.name
        assert case.onnx == (case.model == "onnx_add"), case.name
    assert len({c.name for c in CASES}) == len(CASES)
    assert "onnx_add" not in {
        p.name for p in write_repository(tmp_path / "t", onnx=False).iterdir()
    }


def test_without_perf_analyzer_the_runner_says_so_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(perf_analyzer_runs, "installed", lambda: None)
    assert main([]) == 0
    assert "perf_analyzer is not prepared" in capsys.readouterr().err
