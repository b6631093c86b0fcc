"""`thaw serve` answers what Triton's qa/L0_input_validation, L0_parameters and L0_grpc pin, as
Triton does, with tritonclient as the client over real HTTP and gRPC.

The requests and expected texts are those Triton's tests (v2.51.0) check, restated here so that
these tests need no copy of Triton (tests/conformance/triton_qa.py runs Triton's own files);
the models are this project's own, named for what they exhibit. docs/triton-qa-parity.md lists
the results and what stays different on purpose.
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import python_model
from tests.fixtures.serve_process import ServeProcess
from tests.fixtures.triton_qa_models import add_onnx_zero

pytestmark = pytest.mark.integration

_COUNT_INPUTS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUT", np.array([len(r.inputs())], dtype=np.float32))])
            for r in requests
        ]
"""

_ECHO_PARAMETERS_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            params = json.loads(r.parameters())
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("KEYS", np.array(list(params), dtype=object)),
                pb_utils.Tensor("VALUES", np.array([json.dumps(v) for v in params.values()],
                                                   dtype=object)),
            ]))
        return responses
"""

_STRING_PAIR_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUT", pb_utils.get_input_tensor_by_name(r, "IN1").as_numpy())])
            for r in requests
        ]
"""


def _optional_config(name: str, optional: tuple[bool, ...]) -> str:
    inputs = ",\n".join(
        f'  {{ name: "IN{i}" data_type: TYPE_FP32 dims: [ -1 ]'
        + (" optional: true" if flag else "")
        + " }"
        for i, flag in enumerate(optional)
    )
    return (
        f'name: "{name}"\nbackend: "python"\ninput [\n{inputs}\n]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )


def _repo(root: Path) -> Path:
    python_model(root, "all_optional", _optional_config("all_optional", (True, True)),
                  _COUNT_INPUTS_PY)  # fmt: skip
    python_model(root, "some_optional", _optional_config("some_optional", (False, False, True)),
                  _COUNT_INPUTS_PY)  # fmt: skip
    python_model(
        root, "string_pair",
        'name: "string_pair"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "IN0" data_type: TYPE_STRING dims: [ 16 ] },\n'
        '        { name: "IN1" data_type: TYPE_STRING dims: [ 16 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_STRING dims: [ 16 ] } ]\n',
        _STRING_PAIR_PY,
    )  # fmt: skip
    python_model(
        root, "echo_parameters",
        'name: "echo_parameters"\nbackend: "python"\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "KEYS" data_type: TYPE_STRING dims: [ -1 ] },\n'
        '         { name: "VALUES" data_type: TYPE_STRING dims: [ -1 ] } ]\n',
        _ECHO_PARAMETERS_PY,
    )  # fmt: skip
    add_onnx_zero(root, "fp32_vector", "TYPE_FP32", [8])
    return root


def _serve(repo: Path, *args: str) -> Iterator[ServeProcess]:
    proc = ServeProcess(repo, *args)
    try:
        proc.wait_ready()
        yield proc
    finally:
        rc = proc.stop()
    logs = proc.log_path.read_text()
    assert rc == 0, logs
    assert "unexpected error" not in logs, logs


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _repo(tmp_path_factory.mktemp("triton_qa"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServeProcess]:
    yield from _serve(
        repo,
        "--http-header-forward-pattern", "my_header.*",
        "--grpc-header-forward-pattern", "(?-i)MY_HEADER.*|my_grpc.*",
    )  # fmt: skip


@pytest.fixture(scope="module")
def restricted(repo: Path) -> Iterator[ServeProcess]:
    yield from _serve(
        repo,
        "--grpc-restricted-protocol=model-repository:admin-key=admin-value",
        "--grpc-restricted-protocol=inference,health:infer-key=infer-value",
        "--http-restricted-api=model-repository:admin-key=admin-value",
        "--http-restricted-api=inference,metadata:infer-key=infer-value",
    )  # fmt: skip


def _collect(answers: queue.Queue[object], result: object, error: object) -> None:
    """A stream callback: each answer (a result or an InferenceServerException) in order."""
    answers.put(error if error is not None else result)


def _grpc(server: ServeProcess) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(server.grpc_address)


def _fp32(module, name: str, values: np.ndarray):  # type: ignore[no-untyped-def]
    tensor = module.InferInput(name, list(values.shape), "FP32")
    tensor.set_data_from_numpy(values)
    return tensor


# ---- L0_input_validation ---------------------------------------------------------------


def test_a_model_whose_inputs_are_all_optional_takes_a_request_without_any(
    server: ServeProcess,
) -> None:
    result = _grpc(server).infer("all_optional", inputs=[])
    assert result.as_numpy("OUT").tolist() == [0.0]
    http = httpclient.InferenceServerClient(server.hostport)
    assert http.infer("all_optional", inputs=[]).as_numpy("OUT").tolist() == [0.0]


@pytest.mark.parametrize(
    ("model", "given", "expected"),
    [
        ("some_optional", [], "expected number of inputs between 2 and 3 but got 0 inputs for "
         "model 'some_optional'. Got input(s) [], but missing required input(s) "
         "['IN0','IN1']. Please provide all required input(s)."),
        ("some_optional", ["IN0"], "expected number of inputs between 2 and 3 but got 1 inputs "
         "for model 'some_optional'. Got input(s) ['IN0'], but missing required input(s) "
         "['IN1']. Please provide all required input(s)."),
    ],
)  # fmt: skip
def test_missing_inputs_of_a_model_with_optional_ones_in_tritons_words(
    server: ServeProcess, model: str, given: list[str], expected: str
) -> None:
    inputs = [_fp32(grpcclient, name, np.ones(1, dtype=np.float32)) for name in given]
    with pytest.raises(InferenceServerException) as info:
        _grpc(server).infer(model, inputs=inputs)
    assert expected in str(info.value)


def test_data_larger_than_its_shape_is_tritons_byte_size_mismatch(server: ServeProcess) -> None:
    tensor = _fp32(grpcclient, "INPUT0", np.arange(10, dtype=np.float32)[None])
    tensor.set_shape([1, 8])  # 40 bytes of data for a shape of 32
    with pytest.raises(InferenceServerException) as info:
        _grpc(server).infer("fp32_vector", inputs=[tensor])
    assert (
        "input byte size mismatch for input 'INPUT0' for model 'fp32_vector'. Expected 32, got 40"
        in str(info.value)
    )


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (14, "expected 16 string elements for inference input 'IN1' for model 'string_pair', "
         "got 14"),
        (18, "unexpected number of string elements 17 for inference input 'IN1' for model "
         "'string_pair', expecting 16"),
    ],
)  # fmt: skip
def test_string_element_counts_name_the_last_bad_input_as_triton_does(
    server: ServeProcess, count: int, expected: str
) -> None:
    data = np.array([[str(i) for i in range(count)]], dtype=object)
    inputs = []
    for name in ("IN0", "IN1"):
        tensor = grpcclient.InferInput(name, [1, count], "BYTES")
        tensor.set_data_from_numpy(data)
        tensor.set_shape([1, 16])
        inputs.append(tensor)
    with pytest.raises(InferenceServerException) as info:
        _grpc(server).infer("string_pair", inputs=inputs)
    assert expected in str(info.value)


# ---- L0_parameters ---------------------------------------------------------------------


def _parameters(result) -> dict[str, object]:  # type: ignore[no-untyped-def]
    keys = [k.decode() for k in result.as_numpy("KEYS").tolist()]
    values = [json.loads(v) for v in result.as_numpy("VALUES").tolist()]
    return dict(zip(keys, values, strict=True))


HEADERS = {"header_1": "value_1", "my_header_1": "my_value_1", "MY_HEADER_2": "my_value_2"}


def test_http_headers_matching_the_pattern_reach_the_model_and_binary_data_output_does_not(
    server: ServeProcess,
) -> None:
    http = httpclient.InferenceServerClient(server.hostport)
    inputs = [_fp32(httpclient, "IN", np.ones(1, dtype=np.float32))]
    outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in ("KEYS", "VALUES")]
    result = http.infer(
        "echo_parameters", inputs=inputs, outputs=outputs, parameters={"key1": 1},
        headers=HEADERS,
    )  # fmt: skip
    # Case-insensitive, as Triton prefixes (?i); each under the name as sent.
    assert _parameters(result) == {
        "key1": 1, "my_header_1": "my_value_1", "MY_HEADER_2": "my_value_2",
    }  # fmt: skip


def test_http_parameters_named_triton_are_refused_in_tritons_words(server: ServeProcess) -> None:
    body = {
        "parameters": {"triton_": True},
        "inputs": [{"name": "IN", "datatype": "FP32", "shape": [1], "data": [1.0]}],
    }
    response = requests.post(f"{server.url}/v2/models/echo_parameters/infer", json=body)
    assert response.status_code == 400
    assert response.json() == {
        "error": "parameter keys starting with 'triton_' are reserved for Triton usage and "
        "should not be specified."
    }


def test_grpc_metadata_matching_the_pattern_reaches_the_model_in_calls_and_streams(
    server: ServeProcess,
) -> None:
    # gRPC metadata names are lowercase: the case-sensitive alternative never matches.
    headers = {"header_1": "value_1", "my_header_1": "my_value_1", "my_grpc_a": "a"}
    expected = {"key1": "v", "my_grpc_a": "a"}
    client = _grpc(server)
    inputs = [_fp32(grpcclient, "IN", np.ones(1, dtype=np.float32))]
    result = client.infer("echo_parameters", inputs=inputs, parameters={"key1": "v"},
                          headers=headers)  # fmt: skip
    assert _parameters(result) == expected
    answers: queue.Queue[object] = queue.Queue()
    client.start_stream(partial(_collect, answers), headers=headers)
    try:
        client.async_stream_infer("echo_parameters", inputs, parameters={"key1": "v"})
        assert _parameters(answers.get(timeout=30)) == expected
    finally:
        client.stop_stream()


# ---- L0_grpc / L0_http: --grpc-restricted-protocol, --http-restricted-api --------------

INFER_KEY = {"triton-grpc-protocol-infer-key": "infer-value"}
ADMIN_KEY = {"triton-grpc-protocol-admin-key": "admin-value"}


def test_restricted_protocols_need_their_header_and_others_do_not(
    restricted: ServeProcess,
) -> None:
    client = _grpc(restricted)
    refused = "[StatusCode.UNAVAILABLE] This protocol is restricted, expecting header "
    with pytest.raises(InferenceServerException) as info:
        client.is_server_live()
    assert str(info.value) == refused + "'triton-grpc-protocol-infer-key'"
    assert client.is_server_live(headers=INFER_KEY)
    client.get_inference_statistics("all_optional")  # statistics: not restricted
    with pytest.raises(InferenceServerException, match="This protocol is restricted"):
        client.unload_model("all_optional", headers=INFER_KEY)
    with pytest.raises(InferenceServerException, match="explicit model load / unload"):
        client.unload_model("all_optional", headers=ADMIN_KEY)
    with pytest.raises(InferenceServerException, match="This protocol is restricted"):
        client.infer("all_optional", inputs=[], headers={"test": "1"})
    assert client.infer("all_optional", inputs=[], headers=INFER_KEY).as_numpy("OUT") == [0]


def test_a_restricted_stream_ends_before_its_first_request(restricted: ServeProcess) -> None:
    client = _grpc(restricted)
    answers: queue.Queue[object] = queue.Queue()
    client.start_stream(partial(_collect, answers), headers={"test": "1"})
    try:
        error = answers.get(timeout=30)  # no request written: the server ended the stream
        assert isinstance(error, InferenceServerException)
        assert "This protocol is restricted" in str(error)
    finally:
        client.stop_stream()
    client.start_stream(partial(_collect, answers), headers=INFER_KEY)
    try:
        client.async_stream_infer("all_optional", [])
        assert answers.get(timeout=30).as_numpy("OUT").tolist() == [0.0]  # type: ignore[attr-defined]
    finally:
        client.stop_stream()


def test_restricted_http_apis_are_403_without_their_header(restricted: ServeProcess) -> None:
    client = httpclient.InferenceServerClient(restricted.hostport)
    with pytest.raises(InferenceServerException) as info:
        client.get_server_metadata()
    assert info.value.status() == "403"
    assert info.value.message() == "This API is restricted, expecting header 'infer-key'"
    assert client.get_server_metadata(headers={"Infer-Key": "infer-value"})["name"] == "triton"
    assert client.is_server_live()  # health: restricted on gRPC only
    client.get_inference_statistics("all_optional")  # statistics: not restricted
    with pytest.raises(InferenceServerException, match="This API is restricted"):
        client.unload_model("all_optional", headers={"infer-key": "infer-value"})
    with pytest.raises(InferenceServerException, match="explicit model load / unload"):
        client.unload_model("all_optional", headers={"admin-key": "admin-value"})
    with pytest.raises(InferenceServerException, match="This API is restricted"):
        client.infer("all_optional", inputs=[], headers={"infer-key": "wrong"})
    result = client.infer("all_optional", inputs=[], headers={"infer-key": "infer-value"})
    assert result.as_numpy("OUT").tolist() == [0.0]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--grpc-restricted-protocol=model-reposit,health:k1=v1"],
         "unknown restricted protocol 'model-reposit'"),
        (["--http-restricted-api=model-repository,health:k1=v1",
          "--http-restricted-api=metadata,health:k2=v2"],
         "restricted api 'health' can not be specified in multiple config groups"),
    ],
)  # fmt: skip
def test_a_bad_restriction_stops_the_server_in_tritons_words(
    repo: Path, flags: list[str], message: str
) -> None:
    proc = ServeProcess(repo, *flags)
    deadline = time.monotonic() + 60
    while proc.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    rc = proc.stop()
    assert rc != 0
    assert message in proc.log_path.read_text()
