"""The native front on the gRPC port (decision 0032, phase 3): a real `thaw serve --front
native`, against `--front python` on the same repository, through tritonclient.grpc.

The front answers a hot version's `ModelInfer` itself (numeric and BYTES outputs, requested
outputs, the model's error and an execute that raises worded by `thaw serve`) and forwards every
other call to the Python gRPC server (metadata, config, statistics, repository calls, a bad
request, a decoupled model's stream): the same answers and errors from both, the statistics
counted alike.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf import json_format
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.fixtures.client_example_models import write_repository
from tests.fixtures.native_front_models import front_built, hot_repo, server_cpu_s, wait_hot
from tests.fixtures.serve_process import ServeProcess, both_fronts

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not front_built(), reason="the native front is not built (make native)"),
]

FLAGS = ("--grpc-port=0", "--allow-metrics=false")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServeProcess]]:
    root = tmp_path_factory.mktemp("grpc")
    repo = hot_repo(root, root / "finalized.txt")
    write_repository(repo, ("repeat_int32",))
    with both_fronts(repo, *FLAGS) as started:
        wait_hot(started["native"], ("big", "types", "faulty"))
        yield started


def _client(server: ServeProcess) -> grpcclient.InferenceServerClient:
    assert server.grpc_address, server.stdout_lines
    return grpcclient.InferenceServerClient(server.grpc_address)


def _input(name: str, data: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(data.shape), datatype)
    tensor.set_data_from_numpy(data)
    return tensor


def _types_inputs(rows: int) -> list[grpcclient.InferInput]:
    return [
        _input("F", np.tile(np.array([0.1, -2.5, 3e38], np.float32), (rows, 1)), "FP32"),
        _input("I", np.tile(np.array([2**40, -5], np.int64), (rows, 1)), "INT64"),
        _input("B", np.tile(np.array([True, False]), (rows, 1)), "BOOL"),
        _input("U", np.tile(np.array([0, 7, 255], np.uint8), (rows, 1)), "UINT8"),
    ]


def _big_inputs(n: int) -> list[grpcclient.InferInput]:
    return [
        _input("INPUT0", np.arange(n, dtype=np.float32), "FP32"),
        _input("INPUT1", np.full(n, 0.5, np.float32), "FP32"),
    ]


def _mode(mode: int) -> list[grpcclient.InferInput]:
    return [_input("MODE", np.array([mode], np.int32), "INT32")]


def _requested(*names: str) -> list[grpcclient.InferRequestedOutput]:
    return [grpcclient.InferRequestedOutput(n) for n in names]


# name -> (model, inputs, outputs, request id)
CASES: dict[str, tuple[str, Any, Any, str]] = {
    "numeric outputs": ("big", lambda: _big_inputs(5), None, ""),
    "a requested output": ("big", lambda: _big_inputs(3), lambda: _requested("OUTPUT1"), "r7"),
    "a batch, BYTES and parameters": ("types", lambda: _types_inputs(3), None, "b"),
    "named outputs, one BYTES": (
        "types",
        lambda: _types_inputs(1),
        lambda: _requested("S", "F2"),
        "",
    ),
    "a BYTES answer": ("faulty", lambda: _mode(0), None, "x"),
    "bytes that are not UTF-8": ("faulty", lambda: _mode(4), None, ""),
    "the model's error": ("faulty", lambda: _mode(1), None, "e"),
    "an execute that raises": ("faulty", lambda: _mode(2), None, ""),
    "an unknown output (forwarded)": ("big", lambda: _big_inputs(2), lambda: _requested("Q"), ""),
    "a wrong datatype (forwarded)": (
        "faulty",
        lambda: [_input("MODE", np.array([0], np.int64), "INT64")],
        None,
        "",
    ),
    "an unknown model (forwarded)": ("nobody", lambda: _mode(0), None, ""),
}


def _infer(server: ServeProcess, name: str) -> tuple[str, Any]:
    model, inputs, outputs, request_id = CASES[name]
    client = _client(server)
    try:
        result = client.infer(
            model,
            inputs(),
            outputs=outputs() if outputs is not None else None,
            request_id=request_id,
        )
    except InferenceServerException as exc:
        return "error", (exc.status(), exc.message())
    finally:
        client.close()
    return "ok", json_format.MessageToDict(result.get_response())


@pytest.mark.parametrize("name", list(CASES))
def test_the_same_call_gets_the_same_answer(servers: dict[str, ServeProcess], name: str) -> None:
    python, native = (_infer(servers[f], name) for f in ("python", "native"))
    assert native == python


def test_the_front_answers_hot_calls_itself(servers: dict[str, ServeProcess]) -> None:
    """A hot call costs the Python server next to nothing: over 200 calls its own CPU grows by
    under a quarter of what the same calls cost the server behind the Python front (same run;
    it is ~0 when the front answers, the whole call's when it forwards)."""
    grown = {}
    for front in ("python", "native"):
        server = servers[front]
        with _client(server) as client:
            before = server_cpu_s(server)
            for _ in range(200):
                client.infer("big", _big_inputs(4))
            grown[front] = server_cpu_s(server) - before
    assert grown["native"] < grown["python"] / 4, grown


def _raw(server: ServeProcess, method: str, request: Any, response: Any) -> tuple[str, Any]:
    with grpc.insecure_channel(server.grpc_address) as channel:
        call = channel.unary_unary(
            f"/inference.GRPCInferenceService/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response.FromString,
        )
        try:
            answer, rpc = call.with_call(request, timeout=30)
        except grpc.RpcError as exc:
            seen = (tuple(exc.initial_metadata() or ()), tuple(exc.trailing_metadata() or ()))
            return "error", (exc.code(), exc.details(), seen)
    seen = (tuple(rpc.initial_metadata() or ()), tuple(rpc.trailing_metadata() or ()))
    return "ok", (json_format.MessageToDict(answer), seen)


def _hot_request(mode: int = 0) -> Any:
    request = service_pb2.ModelInferRequest(model_name="faulty", id="h")
    request.inputs.add(name="MODE", datatype="INT32", shape=[1])
    request.raw_input_contents.append(np.array([mode], np.int32).tobytes())
    return request


def _typed_contents() -> Any:
    request = service_pb2.ModelInferRequest(model_name="big")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="FP32", shape=[2])
        tensor.contents.fp32_contents.extend([1.5, 2.0])
    return request


FORWARDED: dict[str, tuple[str, Any, Any]] = {
    "a hot ModelInfer": ("ModelInfer", _hot_request(), service_pb2.ModelInferResponse),
    "a hot ModelInfer that fails": ("ModelInfer", _hot_request(1), service_pb2.ModelInferResponse),
    "ServerLive": ("ServerLive", service_pb2.ServerLiveRequest(), service_pb2.ServerLiveResponse),
    "ModelMetadata": (
        "ModelMetadata",
        service_pb2.ModelMetadataRequest(name="types"),
        service_pb2.ModelMetadataResponse,
    ),
    "ModelConfig": (
        "ModelConfig",
        service_pb2.ModelConfigRequest(name="faulty"),
        service_pb2.ModelConfigResponse,
    ),
    "RepositoryIndex": (
        "RepositoryIndex",
        service_pb2.RepositoryIndexRequest(),
        service_pb2.RepositoryIndexResponse,
    ),
    "a load refused": (
        "RepositoryModelLoad",
        service_pb2.RepositoryModelLoadRequest(model_name="big"),
        service_pb2.RepositoryModelLoadResponse,
    ),
    "an unknown model's metadata": (
        "ModelMetadata",
        service_pb2.ModelMetadataRequest(name="nobody"),
        service_pb2.ModelMetadataResponse,
    ),
    "typed contents": ("ModelInfer", _typed_contents(), service_pb2.ModelInferResponse),
    "a bad version": (
        "ModelInfer",
        service_pb2.ModelInferRequest(model_name="big", model_version="x"),
        service_pb2.ModelInferResponse,
    ),
}


@pytest.mark.parametrize("name", list(FORWARDED))
def test_raw_calls_answer_alike_metadata_included(
    servers: dict[str, ServeProcess], name: str
) -> None:
    python, native = (_raw(servers[f], *FORWARDED[name]) for f in ("python", "native"))
    if name == "RepositoryIndex":  # the repositories' rows, in either order
        for answer in (python, native):
            answer[1][0]["models"].sort(key=lambda row: row["name"])
    assert native == python


def test_a_decoupled_stream_answers_alike(servers: dict[str, ServeProcess]) -> None:
    def stream(server: ServeProcess) -> list[Any]:
        answers: queue.Queue[Any] = queue.Queue()
        client = _client(server)
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        inputs = [
            _input("IN", np.array([4, 2, 0, 1], np.int32), "INT32"),
            _input("DELAY", np.array([1, 2, 3, 4], np.uint32), "UINT32"),
            _input("WAIT", np.array([5], np.uint32), "UINT32"),
        ]
        client.async_stream_infer("repeat_int32", inputs, request_id="s")
        got = []
        for _ in range(4):
            result, error = answers.get(timeout=30)
            assert error is None, error
            got.append(json_format.MessageToDict(result.get_response()))
        client.stop_stream()
        client.close()
        return got

    assert stream(servers["native"]) == stream(servers["python"])


def _stats(server: ServeProcess, model: str) -> dict[str, Any]:
    client = _client(server)
    try:
        doc = client.get_inference_statistics(model, as_json=True)
    finally:
        client.close()
    row = doc["model_stats"][0]
    stats = row["inference_stats"]
    return {
        "inferences": row.get("inference_count"),
        "executions": row.get("execution_count"),
        "success": stats["success"].get("count"),
        "fail": stats["fail"].get("count"),
        "batches": {
            b["batch_size"]: b["compute_infer"].get("count") for b in row.get("batch_stats", [])
        },
    }


def test_the_statistics_count_alike(servers: dict[str, ServeProcess]) -> None:
    """Through ModelStatistics (forwarded): the front's own answers are counted in."""
    for front in ("python", "native"):
        for _ in range(3):
            _infer(servers[front], "a batch, BYTES and parameters")
            _infer(servers[front], "the model's error")
            _infer(servers[front], "an execute that raises")
    python, native = (
        {m: _stats(servers[f], m) for m in ("types", "faulty")} for f in ("python", "native")
    )
    assert native == python
    assert int(native["types"]["success"]) >= 3


def test_the_grpc_port_is_the_fronts(servers: dict[str, ServeProcess], tmp_path: Path) -> None:
    """The announced gRPC address is the front's; the Python server listens privately."""
    native = servers["native"]
    assert "Started GRPCInferenceService at" in native.logs()
    assert "gRPC service behind the native front on unix:" in native.logs()
    with grpc.insecure_channel(native.grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=10).live
