"""`thaw serve` answers request edge cases as real Triton does, over REST and gRPC.

A second side-by-side audit (after test_triton_parity.py): Triton 2.51 (`tritonserver` from
nvidia-pytriton, python backend, `--model-control-mode=explicit`) and `thaw serve` on one
repository of Python-backend models, diffed with raw HTTP, `tritonclient.http` and
`tritonclient.grpc`. Each expected value below is what Triton answered; the tests themselves
need no Triton. Where thaw keeps DESIGN.md's status (bad input is 400, Triton says 500), the
test says so and pins Triton's text.
"""

from __future__ import annotations

import json
import struct
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import ADD_SUB_SAME_DTYPE_PY
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

_IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
"""
# Answers the request's `parameters()` string, as the model sees it.
_PARAMS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", np.array([r.parameters().encode()], dtype=object))]) for r in requests]
"""
_DECOUPLED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            for i in range(count):
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
_RAISES = """
class TritonPythonModel:
    def execute(self, requests):
        raise ValueError("boom")
"""
_MODELS: dict[str, tuple[str, str]] = {
    "add_sub": (
        """
        input [
          { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
          { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
        ]
        output [
          { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
          { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
        ]
        """,
        ADD_SUB_SAME_DTYPE_PY,
    ),
    "batched": (
        """
        max_batch_size: 8
        dynamic_batching { max_queue_delay_microseconds: 100 }
        input [ { name: "X" data_type: TYPE_INT32 dims: [ 3 ] } ]
        output [ { name: "Y" data_type: TYPE_INT32 dims: [ 3 ] } ]
        """,
        _IDENTITY,
    ),
    "params": (
        """
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "Y" data_type: TYPE_STRING dims: [ 1 ] } ]
        """,
        _PARAMS,
    ),
    "strings": (
        """
        input [ { name: "X" data_type: TYPE_STRING dims: [ -1 ] } ]
        output [ { name: "Y" data_type: TYPE_STRING dims: [ -1 ] } ]
        """,
        _IDENTITY,
    ),
    "raises": (
        """
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        """,
        _RAISES,
    ),
    "decoupled": (
        """
        model_transaction_policy { decoupled: true }
        input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
        """,
        _DECOUPLED,
    ),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("parity_requests_repo")
    args = ["--model-control-mode", "explicit"]
    for name, (config, source) in _MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        text = f'name: "{name}"\nbackend: "python"\n' + textwrap.dedent(config)
        (repo / name / "config.pbtxt").write_text(text)
        (repo / name / "1" / "model.py").write_text(textwrap.dedent(source))
        args += ["--load-model", name]
    process = ServeProcess(Path(repo), *args)
    try:
        process.wait_ready()
        yield process
    finally:
        rc = process.stop()
    assert rc == 0, process.logs()


@pytest.fixture(scope="module")
def url(server: ServeProcess) -> str:
    return server.url


@pytest.fixture(scope="module")
def stub(server: ServeProcess) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    channel = grpc.insecure_channel(server.grpc_address)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


_ADD_SUB_INPUTS = [
    {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
    {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
]
_X = [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1]}]


def _infer(url: str, model: str, body: Any) -> requests.Response:
    return requests.post(f"{url}/v2/models/{model}/infer", json=body, timeout=30)


def _rpc_error(call: Any, request: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=30)
    return info.value.code(), info.value.details()


# -- server metadata ----------------------------------------------------------------------

# Triton 2.51's `extensions`, in its order (GET /v2 and ServerMetadata alike).
_TRITON_EXTENSIONS = [
    "classification", "sequence", "model_repository", "model_repository(unload_dependents)",
    "schedule_policy", "model_configuration", "system_shared_memory", "cuda_shared_memory",
    "binary_tensor_data", "parameters", "statistics", "trace", "logging",
]  # fmt: skip


def test_extensions_are_tritons_list_in_its_order(
    url: str, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    assert requests.get(f"{url}/v2", timeout=30).json()["extensions"] == _TRITON_EXTENSIONS
    metadata = stub.ServerMetadata(service_pb2.ServerMetadataRequest(), timeout=30)
    assert list(metadata.extensions) == _TRITON_EXTENSIONS


# -- gRPC ---------------------------------------------------------------------------------


def test_grpc_model_ready_of_an_unknown_model_is_false_not_an_error(server: ServeProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_address)
    try:
        # Triton: ModelReady answers ready=false for any name it does not serve.
        assert client.is_model_ready("add_sub")
        assert not client.is_model_ready("nosuch")
        assert not client.is_model_ready("")
        assert not client.is_model_ready("add_sub", model_version="2")
        # Other calls still say NOT_FOUND.
        with pytest.raises(InferenceServerException) as info:
            client.get_model_metadata("nosuch")
        assert info.value.status() == "StatusCode.NOT_FOUND"
    finally:
        client.close()


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (
            "abc",
            "failed to get model version from specified version string 'abc' (details: stol), "
            "version should be an integral value > 0",
        ),
        ("-1", "invalid model version specified '-1' , version should be an integral value > 0"),
    ],
)
def test_grpc_version_that_is_no_version_is_invalid_argument(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, version: str, message: str
) -> None:
    infer = service_pb2.ModelInferRequest(model_name="add_sub", model_version=version)
    calls = [
        (stub.ModelReady, service_pb2.ModelReadyRequest(name="add_sub", version=version)),
        (stub.ModelMetadata, service_pb2.ModelMetadataRequest(name="add_sub", version=version)),
        (stub.ModelInfer, infer),
    ]
    for call, request in calls:
        assert _rpc_error(call, request) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_grpc_model_infer_of_a_decoupled_model_names_the_rpc(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    request = service_pb2.ModelInferRequest(model_name="decoupled")
    tensor = request.inputs.add(name="IN", datatype="INT32", shape=[1])
    tensor.contents.int_contents.append(2)
    assert _rpc_error(stub.ModelInfer, request) == (
        grpc.StatusCode.UNIMPLEMENTED,
        "ModelInfer RPC doesn't support models with decoupled transaction policy",
    )


def _stream(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, requests: list[Any]
) -> list[tuple[str, str]]:
    """(id, error_message) of each answer on a `triton_grpc_error` stream, then the status
    that ended it, as ("<CODE>", details)."""
    answers = []
    call = stub.ModelStreamInfer(iter(requests), metadata=[("triton_grpc_error", "true")])
    try:
        for answer in call:
            answers.append((answer.infer_response.id, answer.error_message))
    except grpc.RpcError as exc:
        answers.append((exc.code().name, exc.details()))
    return answers


def test_triton_grpc_error_ends_a_stream_on_a_models_error_not_on_a_refusal(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    wrong_type = service_pb2.ModelInferRequest(model_name="raises", id="dt")
    wrong_type.inputs.add(name="X", datatype="INT32", shape=[1]).contents.int_contents.append(1)
    reserved = service_pb2.ModelInferRequest(model_name="params", id="tp")
    reserved.parameters["triton_x"].int64_param = 1
    ok = service_pb2.ModelInferRequest(model_name="params", id="ok")
    ok.inputs.add(name="X", datatype="FP32", shape=[1]).contents.fp32_contents.append(1)
    raised = service_pb2.ModelInferRequest(model_name="raises", id="r")
    raised.inputs.add(name="X", datatype="FP32", shape=[1]).contents.fp32_contents.append(1)
    unknown = service_pb2.ModelInferRequest(model_name="nosuch", id="n")
    # Triton 2.51: refusals before the model runs are answered in-stream (its texts carry a
    # "[request id: dt] " prefix thaw leaves out), the model's error ends the stream.
    assert _stream(stub, [unknown, wrong_type, reserved, ok, raised]) == [
        ("n", "Request for unknown model: 'nosuch' is not found"),
        ("dt", "inference input 'X' data-type is 'INT32', but model 'raises' expects 'FP32'"),
        ("tp", "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
         "following keys starting with 'triton_' are allowed: "
         "triton_enable_empty_final_response"),
        ("ok", ""),
        ("INTERNAL", "Failed to process the request(s) for model 'raises_0', message: "
         "ValueError: boom\n\nAt:\n  raises/1/model.py(4): execute\n"),
    ]  # fmt: skip


# -- request parameters -------------------------------------------------------------------


def test_the_model_sees_parameters_as_triton_shows_them(
    url: str, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    # Triton takes sequence_id/start/end, priority and timeout as request fields (and REST's
    # binary_data_output as the codec's): `parameters()` shows the rest, as compact JSON.
    params = {
        "a": 1, "b": "x", "c": True, "sequence_id": 0, "sequence_start": False,
        "sequence_end": False, "priority": 0, "timeout": 0, "binary_data_output": False,
    }  # fmt: skip
    doc = _infer(url, "params", {"inputs": _X, "parameters": params}).json()
    assert doc["outputs"][0]["data"] == ['{"a":1,"b":"x","c":true}']
    request = service_pb2.ModelInferRequest(model_name="params")
    request.inputs.add(name="X", datatype="FP32", shape=[1]).contents.fp32_contents.append(1)
    for key in ("sequence_id", "priority", "timeout"):
        request.parameters[key].int64_param = 0
    response = stub.ModelInfer(request, timeout=30)
    assert response.raw_output_contents[0] == struct.pack("<I", 2) + b"{}"


@pytest.mark.parametrize("value", [{"b": 1}, [1], None])
def test_a_request_parameter_that_is_no_scalar_is_refused(url: str, value: Any) -> None:
    response = _infer(url, "add_sub", {"inputs": _ADD_SUB_INPUTS, "parameters": {"a": value}})
    assert response.status_code == 400
    expected = "parameter 'a' has invalid type. It should be either 'int', 'bool', or 'string'."
    assert response.json() == {"error": expected}


# -- tensors: JSON data and binary sections -----------------------------------------------

_ONE_SOURCE = (
    "Input must set only one of the following fields: 'data', 'binary_data_size' in "
    "'parameters', 'shared_memory_region' in 'parameters'. "
)


def _binary(url: str, header: dict[str, Any], data: bytes, length: int | None = None) -> Any:
    text = json.dumps(header).encode()
    headers = {"Inference-Header-Content-Length": str(len(text) if length is None else length)}
    response = requests.post(
        f"{url}/v2/models/add_sub/infer", data=text + data, headers=headers, timeout=30
    )
    return response.status_code, response.json()


def _binary_inputs(size0: int = 16, size1: int = 16) -> list[dict[str, Any]]:
    return [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4],
         "parameters": {"binary_data_size": size0}},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4],
         "parameters": {"binary_data_size": size1}},
    ]  # fmt: skip


def test_binary_sections_that_do_not_add_up_have_tritons_texts(url: str) -> None:
    sixteen = np.ones(4, dtype=np.float32).tobytes()
    header = {"inputs": _binary_inputs()}
    assert _binary(url, header, sixteen + sixteen[:8]) == (
        400,
        {"error": "unexpected size for input 'INPUT1', expecting 8 additional bytes for model "
         "'add_sub'"},
    )  # fmt: skip
    assert _binary(url, header, sixteen * 2 + b"xx") == (
        400,
        {"error": "unexpected additional input data for model 'add_sub'"},
    )
    body_length = len(json.dumps(header)) + 32
    assert _binary(url, header, sixteen * 2, length=100_000) == (
        400,
        {"error": f"inference header size should be in range (0, {body_length}), got: 100000"},
    )


def test_an_input_needs_exactly_one_source_of_data(url: str) -> None:
    both = {"inputs": [{**_ADD_SUB_INPUTS[0], "parameters": {"binary_data_size": 16}},
                       _ADD_SUB_INPUTS[1]]}  # fmt: skip
    assert _binary(url, both, np.ones(4, dtype=np.float32).tobytes()) == (
        400,
        {"error": _ONE_SOURCE + "But set 'data' 'binary_data_size'"},
    )
    neither = {"name": "INPUT0", "datatype": "FP32", "shape": [4]}
    response = _infer(url, "add_sub", {"inputs": [neither, _ADD_SUB_INPUTS[1]]})
    assert (response.status_code, response.json()) == (
        400,
        {"error": _ONE_SOURCE + "But no field is set"},
    )


@pytest.mark.parametrize(
    ("model", "inputs", "text"),
    [
        (
            "batched",
            [{"name": "X", "datatype": "INT32", "shape": [1, 3], "data": [1.5, 2, 3]}],
            "attempt to access JSON non-signed-integer as signed-integer (input 'X')",
        ),
        (
            "add_sub",
            [{**_ADD_SUB_INPUTS[0], "data": [True, False, True, False]}, _ADD_SUB_INPUTS[1]],
            "attempt to access JSON non-number as double (input 'INPUT0')",
        ),
        (
            "add_sub",
            [{**_ADD_SUB_INPUTS[0], "data": ["1", "2", "3", "4"]}, _ADD_SUB_INPUTS[1]],
            "attempt to access JSON non-number as double (input 'INPUT0')",
        ),
    ],
)
def test_json_data_of_the_wrong_kind_is_refused_not_converted(
    url: str, model: str, inputs: list[dict[str, Any]], text: str
) -> None:
    # Triton refuses these (500, DESIGN.md: 400); numpy alone would turn 1.5 into 1, true
    # into 1.0 and "1" into 1.0 and run the model on them.
    response = _infer(url, model, {"inputs": inputs})
    assert response.status_code == 400
    assert response.json() == {"error": f"Unable to parse 'data': {text}"}


def test_a_bytes_element_longer_than_its_data_has_tritons_text(
    url: str, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    data = struct.pack("<I", 200) + b"ab"
    header = json.dumps(
        {"inputs": [{"name": "X", "datatype": "BYTES", "shape": [1],
                     "parameters": {"binary_data_size": len(data)}}]}
    ).encode()  # fmt: skip
    response = requests.post(
        f"{url}/v2/models/strings/infer",
        data=header + data,
        headers={"Inference-Header-Content-Length": str(len(header))},
        timeout=30,
    )
    assert (response.status_code, response.json()) == (
        400,
        {"error": "incomplete string data for inference input 'X', expecting string of length "
         "200 but only 2 bytes available"},
    )  # fmt: skip
    request = service_pb2.ModelInferRequest(model_name="strings")
    request.inputs.add(name="X", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(struct.pack("<I", 1))
    assert _rpc_error(stub.ModelInfer, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "incomplete string data for inference input 'X', expecting string of length 1 but only "
        "0 bytes available",
    )


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (
            {"datatype": "INT32"},
            "inference input 'INPUT1' data-type is 'INT32', but model 'add_sub' expects 'FP32'",
        ),
        (
            {"shape": [2, 2]},
            "unexpected shape for input 'INPUT1' for model 'add_sub'. Expected [4], got [2,2]. ",
        ),
    ],
)
def test_of_two_wrong_inputs_the_last_sent_is_named(
    url: str, stub: service_pb2_grpc.GRPCInferenceServiceStub, wrong: dict[str, Any], message: str
) -> None:
    # Triton checks a request's inputs newest first (observed on 2.51, REST and gRPC).
    inputs = [{**entry, **wrong} for entry in _ADD_SUB_INPUTS]
    response = _infer(url, "add_sub", {"inputs": inputs})
    assert (response.status_code, response.json()) == (400, {"error": message})
    request = service_pb2.ModelInferRequest(model_name="add_sub")
    for entry in inputs:
        tensor = request.inputs.add(name=entry["name"], datatype=entry["datatype"])
        tensor.shape.extend(entry["shape"])
        request.raw_input_contents.append(np.ones(4, dtype=np.float32).tobytes())
    assert _rpc_error(stub.ModelInfer, request) == (grpc.StatusCode.INVALID_ARGUMENT, message)


# -- shared memory ------------------------------------------------------------------------


def test_status_of_an_unknown_shared_memory_region_is_not_found(url: str) -> None:
    response = requests.get(f"{url}/v2/systemsharedmemory/region/nosuch/status", timeout=30)
    assert response.status_code == 404  # Triton's NOT_FOUND (thaw said 400)
    assert response.json() == {"error": "Unable to find system shared memory region: 'nosuch'"}
