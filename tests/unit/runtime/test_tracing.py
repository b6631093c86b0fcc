"""The trace extension's records: sampling by rate and count, the files log_frequency asks for,
a replaced setting's records written, Triton's JSON per trace."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from runtime.backends.base import ExecTimings
from runtime.inference import InferRequest, InferResponse, InferTensor, RequestedOutput
from runtime.observe.stats import ModelStats
from runtime.observe.tracing import UNSAMPLED, RequestTimes, RequestTracer
from runtime.scheduling.batch_execution import BatchExecutor, QueuedRequest
from runtime.scheduling.inline_policy import InlinePolicy
from thawwire.trace_settings import TraceSetting, TraceSettings, parse_trace_update

TIMES = RequestTimes(1, 2, 3, 4, 5, 6, 7)


def _tracer(file: Path, **fields: object) -> RequestTracer:
    setting = TraceSetting(level=frozenset({"TIMESTAMPS"}), rate=1, file=str(file))
    return RequestTracer(TraceSettings(TraceSetting(**{**_fields(setting), **fields})))


def _fields(setting: TraceSetting) -> dict[str, object]:
    return {name: getattr(setting, name) for name in setting.__slots__}


def _executed(tracer: RequestTracer, model: str, version: str, request_id: str) -> None:
    """A request no frontend began a trace for, executed: sampled there."""
    request = InferRequest(model, version, [], id=request_id)
    tracer.record(model, version, request, TIMES, [])


def _ids(path: Path) -> list[str]:
    return [e["request_id"] for e in json.loads(path.read_text()) if "request_id" in e]


def test_every_rate_th_request_until_count_is_used_up(tmp_path: Path) -> None:
    file = tmp_path / "t.json"
    tracer = _tracer(file, rate=3, count=2)
    for i in range(12):
        _executed(tracer, "m", "1", f"r{i}")
    assert not file.exists()  # log_frequency 0: written when the server stops
    tracer.close()
    assert _ids(file) == ["r2", "r5"]


def test_count_used_up_with_every_request_sampled_writes_an_indexed_file(tmp_path: Path) -> None:
    file = tmp_path / "t.json"
    tracer = _tracer(file, count=2)
    for i in range(4):
        _executed(tracer, "m", "1", f"r{i}")
    assert _ids(Path(f"{file}.0")) == ["r0", "r1"]  # Triton: count reached, all collected


def test_log_frequency_writes_numbered_files_and_close_the_rest(tmp_path: Path) -> None:
    file = tmp_path / "t.json"
    tracer = _tracer(file, log_frequency=2)
    for i in range(5):
        _executed(tracer, "m", "2", f"r{i}")
    assert _ids(Path(f"{file}.0")) == ["r0", "r1"] and _ids(Path(f"{file}.1")) == ["r2", "r3"]
    tracer.close()
    assert _ids(Path(f"{file}.2")) == ["r4"]
    entries = json.loads(Path(f"{file}.0").read_text())
    assert entries[0] == {"id": 1, "model_name": "m", "model_version": 2, "request_id": "r0"}
    assert entries[1] == {"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 1}]}
    assert [e["timestamps"][0]["ns"] for e in entries[1:8]] == [1, 2, 3, 4, 5, 6, 7]


def test_a_changed_setting_writes_its_records_and_counts_afresh(tmp_path: Path) -> None:
    file = tmp_path / "t.json"
    tracer = _tracer(file)
    _executed(tracer, "m", "1", "before")
    tracer.settings.update("m", parse_trace_update({"trace_rate": "2"}))
    _executed(tracer, "m", "1", "skipped")
    _executed(tracer, "m", "1", "after")
    tracer.settings.update(None, parse_trace_update({"trace_level": ["OFF"]}))
    _executed(tracer, "n", "1", "off")
    tracer.close()
    assert _ids(file) == ["before", "after"]


def test_no_file_or_off_records_nothing(tmp_path: Path) -> None:
    tracer = RequestTracer(TraceSettings(TraceSetting(level=frozenset({"TIMESTAMPS"}))))
    _executed(tracer, "m", "1", "x")
    tracer.close()
    off = _tracer(tmp_path / "t.json", level=frozenset())
    _executed(off, "m", "1", "x")
    off.close()
    assert list(tmp_path.iterdir()) == []


def test_a_frontend_begins_a_trace_its_steps_are_children_and_it_is_written_at_its_end(
    tmp_path: Path,
) -> None:
    file = tmp_path / "t.json"
    tracer = _tracer(file, rate=2)
    assert tracer.begin("ens", "r0") is UNSAMPLED  # the first of two: not sampled
    parent = tracer.begin("ens", "r1")
    assert parent.sampled and tracer.live(parent.id) is parent
    parent.add("HTTP_RECV_START", 1)
    step = parent.child("m", "r1")
    assert (step.parent_id, tracer.live(step.id)) == (parent.id, step)
    step.executed("3", TIMES.activities())
    step.end()
    step.end()  # once
    assert tracer.live(step.id) is None
    parent.executed("1", (("REQUEST_START", 2), ("QUEUE_START", 3), ("REQUEST_END", 9)))
    parent.add("HTTP_SEND_END", 10)
    parent.end()
    assert UNSAMPLED.child("m", "x") is UNSAMPLED  # an unsampled request's steps: none
    tracer.close()
    entries = json.loads(file.read_text())
    heads = [e for e in entries if "timestamps" not in e]
    assert heads == [
        {"id": step.id, "model_name": "m", "model_version": 3, "request_id": "r1",
         "parent_id": parent.id},
        {"id": parent.id, "model_name": "ens", "model_version": 1, "request_id": "r1"},
    ]  # fmt: skip
    stamps = [e for e in entries if e["id"] == parent.id and "timestamps" in e]
    names = [e["timestamps"][0]["name"] for e in stamps]
    assert names == ["HTTP_RECV_START", "REQUEST_START", "QUEUE_START", "REQUEST_END",
                     "HTTP_SEND_END"]  # fmt: skip


def test_a_childs_record_does_not_count_against_the_settings_count(tmp_path: Path) -> None:
    # count 1: the one sampled request and its step's child are one trace, in one file.
    file = tmp_path / "t.json"
    tracer = _tracer(file, count=1)
    parent = tracer.begin("ens", "a")
    child = parent.child("m", "a")
    child.executed("1", TIMES.activities())
    child.end()
    assert not Path(f"{file}.0").exists()  # the parent is still running
    parent.end()
    assert {e["id"] for e in json.loads(Path(f"{file}.0").read_text())} == {1, 2}
    assert tracer.begin("ens", "b") is UNSAMPLED  # count used up
    assert tracer.live("1") is None and tracer.live(None) is None  # a stub names ints only


def test_the_tensors_level_records_each_tensors_values_as_triton_writes_them(
    tmp_path: Path,
) -> None:
    file = tmp_path / "t.json"
    tracer = _tracer(file, level=frozenset({"TENSORS"}))
    trace = tracer.begin("m", "r")
    inputs = [
        InferTensor("F", "FP32", (2, 2), np.array([[1.0, 2.5], [1e-7, 123456789.0]], np.float32)),
        InferTensor("S", "BYTES", (2,), np.array([b"ab", b"c"], dtype=np.object_)),
        InferTensor("B", "BOOL", (2,), np.array([True, False])),
        InferTensor("H", "FP16", (1,), np.array([1.0], np.float16)),
        InferTensor("I", "INT64", (1,), np.array([-3], np.int64)),
    ]
    trace.tensors("TENSOR_QUEUE_INPUT", inputs)
    trace.executed("1", TIMES.activities())
    trace.end()
    tracer.close()
    entries = json.loads(file.read_text())
    # TENSORS alone: no head, no timestamps, as Triton's
    assert [e["tensor"] for e in entries] == [
        {"name": "F", "data": "1,2.5,1e-07,1.23457e+08", "shape": "2,2", "dtype": "FP32"},
        {"name": "S", "data": '"ab","c"', "shape": "2", "dtype": "BYTES"},
        {"name": "B", "data": "1,0", "shape": "2", "dtype": "BOOL"},
        {"name": "H", "data": "", "shape": "1", "dtype": "FP16"},
        {"name": "I", "data": "-3", "shape": "1", "dtype": "INT64"},
    ]
    assert {(e["id"], e["activity"]) for e in entries} == {(trace.id, "TENSOR_QUEUE_INPUT")}


class _SlowPhasesBackend:
    """A backend (a stub's report) whose input and output phases sum past the execution this
    side timed: they come from another process's clock reads."""

    gil_bound = False
    used_image = False

    def __init__(self) -> None:
        self.timings = ExecTimings(compute_input_ns=10**12, compute_output_ns=10**12)

    def execute(self, requests: list[InferRequest]) -> list[InferResponse]:
        return [
            InferResponse("m", "1", [InferTensor("OUTPUT0", "INT32", (1,), np.array([1]))])
            for r in requests
        ]


def test_compute_phases_are_recorded_in_order_whatever_the_backend_reports(
    tmp_path: Path,
) -> None:
    """trace_summary.py (qa/L0_cmdline_trace) refuses a COMPUTE_OUTPUT_START before its
    COMPUTE_INPUT_END: a stub's phases, summing past the server's own marks, are clamped."""
    file = tmp_path / "t.json"
    tracer = _tracer(file)
    executor = BatchExecutor("m", ModelStats(), InlinePolicy(0), tracer.version("m", "1"))
    request = InferRequest("m", "1", [], id="r")
    now = time.perf_counter_ns()
    executor.run(_SlowPhasesBackend(), [QueuedRequest(request, None, 1, now, now)], inline=True)  # type: ignore[arg-type]
    tracer.close()
    stamps = {
        t["name"]: t["ns"] for e in json.loads(file.read_text()) for t in e.get("timestamps", [])
    }
    phases = ("COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END")
    assert [stamps[p] for p in phases] == sorted(stamps[p] for p in phases)


def test_a_requests_backend_outputs_are_those_it_requested(tmp_path: Path) -> None:
    """An ensemble step asks for the outputs its `output_map` names; Triton's backend answers
    those only, and TENSOR_BACKEND_OUTPUT records them (qa/L0_cmdline_trace counts 14)."""
    file = tmp_path / "t.json"
    tracer = _tracer(file, level=frozenset({"TENSORS"}))
    outputs = [
        InferTensor(name, "INT32", (1,), np.array([1], np.int32)) for name in ("OUT0", "OUT1")
    ]
    one = InferRequest("m", "1", [], id="one", requested_outputs=[RequestedOutput("OUT1")])
    tracer.record("m", "1", one, TIMES, outputs)
    tracer.record("m", "1", InferRequest("m", "1", [], id="all"), TIMES, outputs)
    tracer.close()
    names = [e["tensor"]["name"] for e in json.loads(file.read_text())]
    assert names == ["OUT1", "OUT0", "OUT1"]
