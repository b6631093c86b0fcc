"""`thaw serve`'s trace records have Triton 2.51's shape (docs/logging-and-tracing.md; side by
side in docs/triton-http-parity.md, "A fifteenth side by side"), so Triton's
`qa/common/trace_summary.py` reads them: an HTTP request's trace (infer, generate,
generate_stream) carries HTTP_RECV_* and
HTTP_SEND_* around its execution, a gRPC one (ModelInfer, or in a ModelStreamInfer stream)
GRPC_WAITREAD_* and GRPC_SEND_*, each INFER_RESPONSE_COMPLETE; an ensemble's step and a BLS
call given `trace=request.trace()` are child traces (`parent_id`), a BLS call without it is not
traced; the same with the Python models in their stubs and in process."""

from __future__ import annotations

import json
import queue
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.fixtures.models import make_ensemble, python_model
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

_ADD_ONE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + 1)]
            )
            for r in requests
        ]
"""
# Calls `m` twice by BLS: with its request's trace, then without.
_CALLER = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN")
            traced = pb_utils.InferenceRequest(
                model_name="m", inputs=[x], requested_output_names=["OUT"], trace=r.trace()
            ).exec()
            pb_utils.InferenceRequest(
                model_name="m", inputs=[x], requested_output_names=["OUT"]
            ).exec()
            assert r.trace().get_context() is None  # no OpenTelemetry context in triton mode
            out.append(pb_utils.InferenceResponse(traced.output_tensors()))
        return out
"""
_IO = """
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
_STEP = (
    'ensemble_scheduling { step [ { model_name: "m" model_version: -1 '
    'input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "OUT" } } ] }\n'
)
_EXECUTION = {
    "REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END",
}  # fmt: skip
_HTTP = {"HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START", "HTTP_SEND_END"}
_GRPC = {"GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "GRPC_SEND_START", "GRPC_SEND_END"}
_DONE = {"INFER_RESPONSE_COMPLETE"}


def _traced_server(repo: Path, trace: Path, level: str) -> ServeProcess:
    """`thaw serve` tracing every request at `level` into `trace`, once ready."""
    server = ServeProcess(
        repo, "--trace-config", f"triton,file={trace}", "--trace-config", f"level={level}",
        "--trace-config", "rate=1",
    )  # fmt: skip
    try:
        server.wait_ready(120)
    except BaseException:
        server.stop()
        raise
    return server


def _input(value: float) -> httpclient.InferInput:
    tensor = httpclient.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.array([value], np.float32))
    return tensor


def _records(path: Path) -> dict[int, dict[str, Any]]:
    """Triton's trace file grouped by id: the head's fields and the set of activities."""
    found: dict[int, dict[str, Any]] = defaultdict(lambda: {"activities": set()})
    for entry in json.loads(path.read_text()):
        if "timestamps" in entry:
            found[entry["id"]]["activities"] |= {t["name"] for t in entry["timestamps"]}
        else:
            found[entry["id"]].update(entry)
    return dict(found)


def _shape(records: dict[int, dict[str, Any]], trace_id: int) -> tuple[object, ...]:
    record = records[trace_id]
    parent = record.get("parent_id")
    parent_model = records[parent]["model_name"] if parent is not None else None
    return (record["model_name"], record.get("request_id"), parent_model, record["activities"])


@pytest.mark.parametrize("runtime", ["process", "in_process"])
def test_trace_records_have_tritons_frontend_activities_and_child_traces(
    tmp_path: Path, runtime: str
) -> None:
    repo = tmp_path / "repo"
    where = f'parameters {{ key: "thaw.python_runtime" value: {{ string_value: "{runtime}" }} }}\n'
    python_model(repo, "m", f'name: "m"\nbackend: "python"\n{_IO}{where}', _ADD_ONE)
    python_model(repo, "bls", f'name: "bls"\nbackend: "python"\n{_IO}{where}', _CALLER)
    make_ensemble(repo, "ens", f'name: "ens"\nplatform: "ensemble"\n{_IO}{_STEP}')
    trace = tmp_path / "trace.json"
    server = _traced_server(repo, trace, "TIMESTAMPS")
    try:
        http = httpclient.InferenceServerClient(server.hostport)
        tensor = _input(1.0)
        for model in ("m", "ens", "bls"):
            http.infer(model, [tensor], request_id=f"h-{model}")
        for route in ("generate", "generate_stream"):  # the generate extension's too
            body = json.dumps({"id": route, "IN": [1.0]}).encode()
            post = urllib.request.Request(f"{server.url}/v2/models/m/{route}", body)
            with urllib.request.urlopen(post, timeout=60) as answer:
                assert answer.status == 200 and b"2.0" in answer.read()
        with grpcclient.InferenceServerClient(server.grpc_address) as grpc:
            message = grpcclient.InferInput("IN", [1], "FP32")
            message.set_data_from_numpy(np.array([1.0], np.float32))
            grpc.infer("m", [message], request_id="g-m")
            answers: queue.Queue[object] = queue.Queue()
            grpc.start_stream(callback=lambda result, error: answers.put(error or result))
            for model in ("m", "ens"):
                grpc.async_stream_infer(model, [message], request_id=f"s-{model}")
            for _ in range(2):
                assert not isinstance(answers.get(timeout=60), Exception)
            grpc.stop_stream()
        time.sleep(0.5)  # the last answer's trace is written once it was sent
    finally:
        server.stop()
    records = _records(trace)
    shapes = sorted((_shape(records, i) for i in records), key=repr)
    assert shapes == sorted(
        [
            ("m", "h-m", None, _HTTP | _EXECUTION | _DONE),
            ("ens", "h-ens", None, _HTTP | _DONE | {"REQUEST_START", "QUEUE_START", "REQUEST_END"}),
            ("m", "h-ens", "ens", _EXECUTION),
            ("bls", "h-bls", None, _HTTP | _EXECUTION | _DONE),
            ("m", None, "bls", _EXECUTION),  # the call given the trace; the other is not traced
            ("m", "g-m", None, _GRPC | _EXECUTION | _DONE),
            ("m", "generate", None, _HTTP | _EXECUTION | _DONE),
            ("m", "generate_stream", None, _HTTP | _EXECUTION | _DONE),
            # over a stream as over ModelInfer
            ("m", "s-m", None, _GRPC | _EXECUTION | _DONE),
            ("ens", "s-ens", None, _GRPC | _DONE | {"REQUEST_START", "QUEUE_START", "REQUEST_END"}),
            ("m", "s-ens", "ens", _EXECUTION),
        ],
        key=repr,
    ), shapes
    assert all(records[i]["model_version"] == 1 for i in records)


def test_the_tensors_level_records_inputs_as_queued_and_outputs_as_answered(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    python_model(repo, "m", f'name: "m"\nbackend: "python"\n{_IO}', _ADD_ONE)
    make_ensemble(repo, "ens", f'name: "ens"\nplatform: "ensemble"\n{_IO}{_STEP}')
    trace = tmp_path / "trace.json"
    server = _traced_server(repo, trace, "TENSORS")
    try:
        httpclient.InferenceServerClient(server.hostport).infer("ens", [_input(1.5)])
    finally:
        server.stop()
    entries = json.loads(trace.read_text())
    parent = min(e["id"] for e in entries)
    # Triton 2.51's records at TENSORS alone: no head, no timestamps; the ensemble's and its
    # step's tensors (FP32 as C++ writes them)
    assert sorted((e["id"] == parent, e["activity"], json.dumps(e["tensor"])) for e in entries) == [
        (False, "TENSOR_BACKEND_OUTPUT", json.dumps(_tensor("OUT", "2.5"))),
        (False, "TENSOR_QUEUE_INPUT", json.dumps(_tensor("IN", "1.5"))),
        (True, "TENSOR_BACKEND_OUTPUT", json.dumps(_tensor("OUT", "2.5"))),
        (True, "TENSOR_QUEUE_INPUT", json.dumps(_tensor("IN", "1.5"))),
    ]


def _tensor(name: str, data: str) -> dict[str, str]:
    return {"name": name, "data": data, "shape": "1", "dtype": "FP32"}
