"""The platform's own calls through a real `thaw up` (thawwire.internal_calls): a Python
model's BLS call to a model on another replica, plain and as a stream, carries a body over the
client cap (`--max-body-bytes`) up to `--max-internal-body-bytes`; a client's body of the same
size is refused 413, with a made-up token too; the token never reaches a model as a forwarded
header's parameter, whatever the forward pattern; a BLS body over the internal cap gets the
413 naming that flag."""

from __future__ import annotations

import json
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.up_process import UpProcess, light_args, with_params
from thawwire.internal_calls import HEADER

pytestmark = pytest.mark.integration

_PUBLIC = 256 * 1024  # --max-body-bytes
_INTERNAL = 4 * 1024 * 1024  # --max-internal-body-bytes

# OUT = IN; PARAMS = the request's parameters (JSON): the forwarded headers among them.
_IDENTITY_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            params = np.array([request.parameters().encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", data), pb_utils.Tensor("PARAMS", params),
            ]))
        return responses
"""

# N = [elements, stream]: sends N float32s to `identity` by BLS (a stream when stream is 1);
# answers {"same": the echo equals what was sent, "params": identity's parameters, "error"}.
_CALLER_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "N").as_numpy()
            count, stream = int(n[0]), int(n[1])
            data = np.arange(count, dtype=np.float32)
            bls = pb_utils.InferenceRequest(
                model_name="identity",
                inputs=[pb_utils.Tensor("IN", data)],
                requested_output_names=["OUT", "PARAMS"],
            )
            response = next(bls.exec(decoupled=True)) if stream else bls.exec()
            doc = {"same": False, "params": None, "error": None}
            if response.has_error():
                doc["error"] = response.error().message()
            else:
                out = pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()
                params = pb_utils.get_output_tensor_by_name(response, "PARAMS").as_numpy()[0]
                doc["same"] = bool(np.array_equal(out, data))
                doc["params"] = json.loads(params)
            result = np.array([json.dumps(doc).encode()], dtype=np.object_)
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("RESULT", result)]))
        return answers
"""


def _model(repo: Path, name: str, source: str, config: str) -> None:
    model = repo / name
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(textwrap.dedent(source).lstrip())
    (model / "config.pbtxt").write_text(textwrap.dedent(config).lstrip())
    with_params(model, max_replicas=1)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("internal_repo")
    _model(
        repo, "identity", _IDENTITY_PY,
        'name: "identity"\nbackend: "python"\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] },'
        ' { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]\n',
    )  # fmt: skip
    _model(
        repo, "caller", _CALLER_PY,
        'name: "caller"\nbackend: "python"\n'
        'input [ { name: "N" data_type: TYPE_INT32 dims: [ 2 ] } ]\n'
        'output [ { name: "RESULT" data_type: TYPE_STRING dims: [ 1 ] } ]\n',
    )  # fmt: skip
    server = UpProcess(
        repo,
        *light_args(repo),
        "--warm-pool", "2",
        "--max-body-bytes", str(_PUBLIC),
        "--max-internal-body-bytes", str(_INTERNAL),
        "--http-header-forward-pattern", ".*",
        "--grpc-header-forward-pattern", ".*",
    )  # fmt: skip
    assert server.grpc_address, server.log()
    yield server
    server.stop()


def _post(up: UpProcess, model: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    request = urllib.request.Request(up.url + f"/v2/models/{model}/infer", data=body)
    for key, value in headers.items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=180) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _call(up: UpProcess, count: int, *, stream: bool) -> dict:
    body = json.dumps(
        {"inputs": [{"name": "N", "datatype": "INT32", "shape": [2], "data": [count, int(stream)]}]}
    ).encode()
    status, doc = _post(up, "caller", body, {"Content-Type": "application/json"})
    assert status == 200, (doc, up.log()[-3000:])
    result: dict = json.loads(doc["outputs"][0]["data"][0])
    return result


def _binary_body(count: int) -> tuple[bytes, dict[str, str]]:
    header = json.dumps(
        {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [count],
                     "parameters": {"binary_data_size": count * 4}}]}
    ).encode()  # fmt: skip
    data = np.zeros(count, dtype=np.float32).tobytes()
    return header + data, {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }


@pytest.mark.parametrize("stream", [False, True], ids=["exec", "exec_decoupled"])
def test_a_bls_call_over_the_client_cap_passes_with_the_token(up: UpProcess, stream: bool) -> None:
    count = 3 * _PUBLIC // 4 * 4 // 4  # 3x the client cap in float32s: 768 KiB
    result = _call(up, count, stream=stream)
    assert result["error"] is None and result["same"] is True, result
    # The token reached no model: the forward pattern `.*` copied every other header.
    names = {name.lower() for name in result["params"]}
    assert HEADER.lower() not in names and "content-type" in names, result["params"]


def test_a_client_body_of_that_size_is_refused_with_or_without_a_made_up_token(
    up: UpProcess,
) -> None:
    body, headers = _binary_body(3 * _PUBLIC // 4)
    status, doc = _post(up, "identity", body, headers)
    assert status == 413 and "--max-body-bytes" in doc["error"], doc
    status, doc = _post(up, "identity", body, {**headers, HEADER: "x" * 43})
    assert status == 413 and "--max-body-bytes" in doc["error"], doc
    # Under the cap the same client is served (the refusal was the size, not the route).
    small, headers = _binary_body(16)
    status, doc = _post(up, "identity", small, headers)
    assert status == 200, doc


@pytest.mark.parametrize("stream", [False, True], ids=["exec", "exec_decoupled"])
def test_a_bls_call_over_the_internal_cap_is_refused_naming_its_flag(
    up: UpProcess, stream: bool
) -> None:
    result = _call(up, 2 * _INTERNAL // 4, stream=stream)
    assert result["same"] is False and "--max-internal-body-bytes" in str(result["error"]), result
    # The caller keeps serving after the refusal.
    assert _call(up, 16, stream=stream)["same"] is True
