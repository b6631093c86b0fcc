"""`thaw serve` answers the gRPC API and the control endpoints as real Triton does.

A fourth side-by-side audit (docs/triton-http-parity.md, "A fourth side by side"): Triton 2.51
(`tritonserver` from nvidia-pytriton, python backend) and `thaw serve` on one repository of
Python-backend models, started with the same flags (`--model-control-mode explicit` and
`none`), every RPC sent through raw `service_pb2_grpc` stubs and `tritonclient.grpc`, the
control endpoints over REST too; codes, texts and bodies diffed. Each expected value below is
what Triton answered; the tests themselves need no Triton. Triton prefixes request errors with
"[request id: <id_unknown>] ", which thaw leaves out (docs/serve.md).
"""

from __future__ import annotations

import base64
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
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import ADD_SUB_SAME_DTYPE_PY
from tests.fixtures.serve_process import ServeProcess, serving

pytestmark = pytest.mark.integration

_IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""
_MODELS: dict[str, tuple[str, str | None]] = {
    "simple": (
        """
        backend: "python"
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
                { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
                 { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
        """,
        ADD_SUB_SAME_DTYPE_PY,
    ),
    "strings": (
        """
        backend: "python"
        input [ { name: "IN" data_type: TYPE_STRING dims: [ -1 ] } ]
        output [ { name: "OUT" data_type: TYPE_STRING dims: [ -1 ] } ]
        """,
        _IDENTITY,
    ),
    "ens": (
        """
        platform: "ensemble"
        input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
                { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "S" data_type: TYPE_FP32 dims: [ 4 ] } ]
        ensemble_scheduling { step [ { model_name: "simple" model_version: -1
          input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
          output_map { key: "OUTPUT0" value: "S" } } ] }
        """,
        None,
    ),
}


def _repository(root: Path) -> Path:
    for name, (config, source) in _MODELS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(textwrap.dedent(config))
        if source is not None:
            (root / name / "1" / "model.py").write_text(textwrap.dedent(source))
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = _repository(tmp_path_factory.mktemp("parity_grpc_repo"))
    process = ServeProcess(repo, "--model-control-mode", "explicit", "--load-model", "*")
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


def _rpc_error(call: Any, request: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=30)
    return info.value.code(), info.value.details()


def _simple(**contents: list[float]) -> Any:
    """A `simple` request with typed contents: INPUT0 the given fields, INPUT1 four floats."""
    request = service_pb2.ModelInferRequest(model_name="simple")
    first = request.inputs.add(name="INPUT0", datatype="FP32", shape=[4])
    for field, values in contents.items():
        getattr(first.contents, field).extend(values)
    request.inputs.add(name="INPUT1", datatype="FP32", shape=[4]).contents.fp32_contents.extend(
        [1, 2, 3, 4]
    )
    return request


# -- ModelInfer: where each input's data is, typed contents --------------------------------


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (_simple(int_contents=[1, 2, 3, 4]),
         "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type "
         "'INT32', expected datatype 'FP32'"),
        # two fields: the message's order, int_contents before fp32_contents
        (_simple(fp32_contents=[1, 2, 3, 4], int_contents=[1]),
         "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type "
         "'INT32', expected datatype 'FP32'"),
        (_simple(fp32_contents=[1, 2, 3]),
         "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 16, got 12"),
        (_simple(fp32_contents=[1, 2, 3, 4, 5]),
         "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 16, got 20"),
    ],
)  # fmt: skip
def test_typed_contents_are_refused_in_tritons_words(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, request_: Any, message: str
) -> None:
    assert _rpc_error(stub.ModelInfer, request_) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_the_first_input_without_data_is_named(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    request = service_pb2.ModelInferRequest(model_name="simple")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[4])
    request.inputs.add(name="INPUT1", datatype="FP32", shape=[4])
    # Triton names INPUT0 (thaw named INPUT1, checking newest first as Triton's core does)
    assert _rpc_error(stub.ModelInfer, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "unable to find data for input tensor 'INPUT0' for model 'simple' in request.",
    )
    request.raw_input_contents.append(np.ones(4, np.float32).tobytes())
    assert _rpc_error(stub.ModelInfer, request) == (  # (thaw: "raw_input_contents holds 1 ...")
        grpc.StatusCode.INVALID_ARGUMENT,
        "unable to find data for input tensor 'INPUT1' for model 'simple' in request.",
    )


def test_raw_entries_past_the_last_input_are_not_read(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    request = service_pb2.ModelInferRequest(model_name="simple")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[4])
    request.inputs.add(name="INPUT1", datatype="FP32", shape=[4])
    request.raw_input_contents.extend([np.full(4, 2, np.float32).tobytes()] * 3)
    response = stub.ModelInfer(request, timeout=30)  # Triton serves it; thaw refused it
    sums = np.frombuffer(response.raw_output_contents[0], np.float32)
    assert sums.tolist() == [4.0, 4.0, 4.0, 4.0]


def test_an_input_whose_datatype_is_no_datatype(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    request = service_pb2.ModelInferRequest(model_name="simple", id="dt")
    for name, datatype in (("INPUT0", "FP32"), ("INPUT1", "fp32")):
        request.inputs.add(name=name, datatype=datatype, shape=[4])
        request.raw_input_contents.append(np.ones(4, np.float32).tobytes())
    # Triton's core words it against the model (thaw: "input 'INPUT1' has unknown datatype")
    message = "inference input 'INPUT1' data-type is '<invalid>', but model 'simple' expects 'FP32'"
    assert _rpc_error(stub.ModelInfer, request) == (grpc.StatusCode.INVALID_ARGUMENT, message)
    answers = list(stub.ModelStreamInfer(iter([request]), timeout=30))
    assert [(a.infer_response.id, a.error_message) for a in answers] == [("dt", message)]


@pytest.mark.parametrize(
    ("shape", "raw", "message"),
    [
        ([2], struct.pack("<I", 5) + b"ab",
         "expected 2 string elements for inference input 'IN' for model 'strings', got 1"),
        ([1], struct.pack("<I", 5) + b"ab",
         "incomplete string data for inference input 'IN', expecting string of length 5 but "
         "only 2 bytes available"),
    ],
)  # fmt: skip
def test_a_cut_bytes_element_is_named_as_triton_names_it(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, shape: list[int], raw: bytes, message: str
) -> None:
    request = service_pb2.ModelInferRequest(model_name="strings")
    request.inputs.add(name="IN", datatype="BYTES", shape=shape)
    request.raw_input_contents.append(raw)
    assert _rpc_error(stub.ModelInfer, request) == (grpc.StatusCode.INVALID_ARGUMENT, message)


# -- RepositoryModelLoad / Unload ----------------------------------------------------------


def _load(name: str, params: dict[str, Any] | None = None) -> Any:
    request = service_pb2.RepositoryModelLoadRequest(model_name=name)
    for key, value in (params or {}).items():
        param = request.parameters[key]
        if isinstance(value, bytes):
            param.bytes_param = value
        elif isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            param.int64_param = value
        else:
            param.string_param = value
    return request


@pytest.mark.parametrize(
    ("request_", "message"),
    [  # Triton's words alone: thaw said "failed to load 'simple', ..." or ignored the key
        (_load("simple", {"config": 5}),
         "invalid value type for load parameter 'config', expected string_param."),
        (_load("simple", {"config": '{"backend": "python"}', "file:1/model.py": "text"}),
         "invalid value type for load parameter 'file:1/model.py', expected bytes_param."),
        (_load("simple", {"foo": 5}), "unrecognized load parameter 'foo'."),
        (_load("simple", {"foo": "x"}), "unrecognized load parameter 'foo'."),
    ],
)  # fmt: skip
def test_load_parameters_of_the_wrong_kind_or_name(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, request_: Any, message: str
) -> None:
    assert _rpc_error(stub.RepositoryModelLoad, request_) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        message,
    )


def test_unload_dependents_must_be_a_bool_param(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    request = service_pb2.RepositoryModelUnloadRequest(model_name="strings")
    request.parameters["unload_dependents"].string_param = "true"
    assert _rpc_error(stub.RepositoryModelUnload, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid value type for 'unload_dependents' parameter, expected bool_param.",
    )


def test_a_refused_load_carries_tritons_words(server: ServeProcess) -> None:
    # qa/L0_lifecycle asserts these words over both protocols; thaw keeps its status (404 for
    # a model the repository lacks, 400 for a bad config) and says why after them.
    grpc_client = grpcclient.InferenceServerClient(server.grpc_address)
    http_client = httpclient.InferenceServerClient(server.hostport)
    for client in (grpc_client, http_client):
        with pytest.raises(InferenceServerException) as unknown:
            client.load_model("nosuch")
        assert "failed to load 'nosuch', failed to poll from model repository" in str(
            unknown.value.message()
        )
        with pytest.raises(InferenceServerException) as bad_config:
            client.load_model("simple", config="{not json")
        assert str(bad_config.value.message()).startswith(
            "failed to load 'simple', failed to poll from model repository"
        )
    assert grpc_client.is_model_ready("simple")  # a refused load leaves the model serving


def test_load_parameters_are_checked_before_the_control_mode(tmp_path: Path) -> None:
    # Triton's frontend checks the parameters, then its core the mode: in `none` a bad
    # parameter is INVALID_ARGUMENT (thaw said UNAVAILABLE, "... polling is enabled").
    with serving(_repository(tmp_path), "--model-control-mode", "none") as process:
        channel = grpc.insecure_channel(process.grpc_address)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert _rpc_error(stub.RepositoryModelLoad, _load("simple", {"foo": 1})) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "unrecognized load parameter 'foo'.",
        )
        assert _rpc_error(stub.RepositoryModelLoad, _load("simple")) == (
            grpc.StatusCode.UNAVAILABLE,
            "explicit model load / unload is not allowed if polling is enabled",
        )
        channel.close()


# -- LogSettings, CUDA shared memory, ensemble config --------------------------------------


def test_a_log_setting_without_a_value_is_refused(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    request = service_pb2.LogSettingsRequest()
    request.settings["log_info"].SetInParent()  # the key, no value (thaw took it as no change)
    assert _rpc_error(stub.LogSettings, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "expect boolean for 'log_info'",
    )


def test_cuda_shared_memory_of_a_triton_without_a_gpu(
    url: str, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    status = requests.get(f"{url}/v2/cudasharedmemory/region/nope/status", timeout=30)
    assert (status.status_code, status.json()) == (  # thaw said 400
        404,
        {"error": "Unable to find cuda shared memory region: 'nope'"},
    )
    assert _rpc_error(
        stub.CudaSharedMemoryStatus, service_pb2.CudaSharedMemoryStatusRequest(name="nope")
    ) == (grpc.StatusCode.NOT_FOUND, "Unable to find cuda shared memory region: 'nope'")
    # the register body is read as Triton reads it (thaw answered "GPUs not supported" to any)
    short: dict[str, Any] = {
        "raw_handle": {"b64": base64.b64encode(b"x").decode()}, "device_id": 0, "byte_size": 16
    }  # fmt: skip
    bodies: list[tuple[dict[str, Any], str]] = [
        ({"device_id": 0, "byte_size": 16},
         "Shared memory register request has no 'raw_handle' field"),
        (short, "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"),
    ]  # fmt: skip
    for body, message in bodies:
        answer = requests.post(
            f"{url}/v2/cudasharedmemory/region/c/register", json=body, timeout=30
        )
        assert (answer.status_code, answer.json()) == (400, {"error": message})


def test_an_ensembles_config_has_only_tritons_fields(url: str) -> None:
    config = requests.get(f"{url}/v2/models/ens/config", timeout=30).json()
    assert list(config["ensemble_scheduling"]) == ["step"]  # no max_inflight_requests


# -- unload and the ensembles that run a model ---------------------------------------------


def test_an_unload_takes_its_ensembles_and_with_dependents_their_models(tmp_path: Path) -> None:
    # Triton 2.51, observed: unloading a model an ensemble runs unloads the ensemble too (thaw
    # left it READY, failing each request); `unload_dependents` on an ensemble unloads the
    # models it runs that no model still up runs (thaw ignored the flag).
    repo = _repository(tmp_path)
    (repo / "ens2" / "1").mkdir(parents=True)
    (repo / "ens2" / "config.pbtxt").write_text((repo / "ens" / "config.pbtxt").read_text())
    with serving(repo, "--model-control-mode", "explicit", "--load-model", "*") as process:
        client = grpcclient.InferenceServerClient(process.grpc_address)
        client.unload_model("simple")
        assert not any(client.is_model_ready(m) for m in ("simple", "ens", "ens2"))
        client.load_model("ens")
        client.load_model("ens2")
        assert client.is_model_ready("simple")
        client.unload_model("ens", unload_dependents=True)  # ens2 still runs simple
        ready = {m: client.is_model_ready(m) for m in ("simple", "ens", "ens2")}
        assert ready == {"simple": True, "ens": False, "ens2": True}
        client.unload_model("ens2", unload_dependents=True)
        assert not client.is_model_ready("simple")
        rows = {(r["name"], r.get("reason")) for r in client.get_model_repository_index(
            as_json=True)["models"]}  # fmt: skip
        assert {("ens", "unloaded"), ("ens2", "unloaded"), ("simple", "unloaded")} <= rows
        client.load_model("ens")  # an ensemble's load brings back what it runs
        assert client.is_model_ready("simple") and client.is_model_ready("ens")
        client.close()


def test_a_version_a_load_left_out_keeps_its_index_row(tmp_path: Path) -> None:
    # Triton 2.51, observed: version 1 replaced by a load's `file:5/...` stays in the index,
    # "unloaded", and so does 5 once the repository's own files are loaded again (thaw
    # listed only the versions serving).
    repo = _repository(tmp_path)
    config = (
        '{"backend": "python", "input": [{"name": "IN", "data_type": "TYPE_STRING", '
        '"dims": [-1]}], "output": [{"name": "OUT", "data_type": "TYPE_STRING", "dims": [-1]}]}'
    )
    source = (repo / "strings" / "1" / "model.py").read_bytes()
    with serving(repo, "--model-control-mode", "explicit", "--load-model", "strings") as process:
        client = grpcclient.InferenceServerClient(process.grpc_address)

        def rows() -> list[tuple[str, str, str]]:
            index = client.get_model_repository_index(as_json=True)["models"]
            return [
                (r["version"], r["state"], r.get("reason", ""))
                for r in index
                if r["name"] == "strings"
            ]

        client.load_model("strings", config=config, files={"file:5/model.py": source})
        assert rows() == [("1", "UNAVAILABLE", "unloaded"), ("5", "READY", "")]
        client.unload_model("strings")
        assert rows() == [("1", "UNAVAILABLE", "unloaded"), ("5", "UNAVAILABLE", "unloaded")]
        client.load_model("strings")
        assert rows() == [("1", "READY", ""), ("5", "UNAVAILABLE", "unloaded")]
        client.close()


def test_an_ensembles_answer_carries_the_sequence_parameters(
    url: str, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    # Triton 2.51's ensemble answers echo the request's sequence parameters, or their
    # defaults (thaw's carried none); a plain model's carry none on both.
    inputs = [
        {"name": name, "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}
        for name in ("A", "B")
    ]
    body = {"parameters": {"sequence_id": 5, "sequence_start": True}, "inputs": inputs}
    answer = requests.post(f"{url}/v2/models/ens/infer", json=body, timeout=30).json()
    assert answer["parameters"] == {
        "sequence_id": 5, "sequence_start": True, "sequence_end": False
    }  # fmt: skip
    assert list(answer) == ["model_name", "model_version", "parameters", "outputs"]
    request = service_pb2.ModelInferRequest(model_name="ens")
    for name in ("A", "B"):
        request.inputs.add(name=name, datatype="FP32", shape=[4])
        request.raw_input_contents.append(np.ones(4, np.float32).tobytes())
    parameters = stub.ModelInfer(request, timeout=30).parameters
    assert {key: parameters[key].WhichOneof("parameter_choice") for key in parameters} == {
        "sequence_id": "int64_param", "sequence_start": "bool_param", "sequence_end": "bool_param"
    }  # fmt: skip
    assert parameters["sequence_id"].int64_param == 0
    request.model_name = "simple"
    request.inputs[0].name, request.inputs[1].name = "INPUT0", "INPUT1"
    assert not stub.ModelInfer(request, timeout=30).parameters
