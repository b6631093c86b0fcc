"""BLS streams through a real `thaw up`: a Python model's `exec(decoupled=True)` to a decoupled
model on another replica gets every one of its responses, through the activator (which wakes
that model from zero), and the end of the stream."""

from __future__ import annotations

import json
import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.up_process import UpProcess, with_params

pytestmark = pytest.mark.integration

# Decoupled: IN = [n] -> n responses OUT = [i], i = 0..n-1, then the final flag alone.
REPEAT_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            if n < 0:
                error = pb_utils.TritonError(f"cannot repeat {n} times")
                sender.send(
                    pb_utils.InferenceResponse(error=error),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            for i in range(n):
                out = pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

# Sends IN to `repeat` as a BLS stream; answers every response's OUT in order, and how many
# empty (final) responses ended the stream, or the first error's message. IN = -100 / -101:
# a plain exec() to a model no replica has / to the empty name; answers its error's message.
_CALLER_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            target = {-100: "missing", -101: ""}.get(int(data[0]))
            if target is not None:
                bls = pb_utils.InferenceRequest(
                    model_name=target, inputs=[pb_utils.Tensor("IN", data)],
                    requested_output_names=["OUT"],
                )
                error = bls.exec().error()
                doc = {"error": None if error is None else error.message()}
                result = np.array([json.dumps(doc).encode()], dtype=np.object_)
                answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("RESULT", result)]))
                continue
            bls = pb_utils.InferenceRequest(
                model_name="repeat",
                inputs=[pb_utils.Tensor("IN", data)],
                requested_output_names=["OUT"],
            )
            values, empty, error = [], 0, None
            for response in bls.exec(decoupled=True):
                if response.has_error():
                    error = response.error().message()
                    break
                out = pb_utils.get_output_tensor_by_name(response, "OUT")
                if out is None:
                    empty += 1
                else:
                    values.append(int(out.as_numpy()[0]))
            doc = {"values": values, "empty": empty, "error": error}
            result = np.array([json.dumps(doc).encode()], dtype=np.object_)
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("RESULT", result)]))
        return answers
"""


def _model(repo: Path, name: str, source: str, config: str) -> Path:
    model = repo / name
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(textwrap.dedent(source).lstrip())
    (model / "config.pbtxt").write_text(textwrap.dedent(config).lstrip())
    return model


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("bls_repo")
    io = """
        input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
    """
    _model(
        repo, "repeat", REPEAT_PY,
        f'name: "repeat"\nbackend: "python"\nmodel_transaction_policy {{ decoupled: true }}\n'
        f'{io}\noutput [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]\n',
    )  # fmt: skip
    _model(
        repo, "caller", _CALLER_PY,
        f'name: "caller"\nbackend: "python"\n{io}\n'
        'output [ { name: "RESULT" data_type: TYPE_STRING dims: [ 1 ] } ]\n',
    )  # fmt: skip
    with_params(repo / "repeat", max_replicas=1)
    with_params(repo / "caller", max_replicas=1)
    server = UpProcess(
        repo,
        "--warm-pool", "2",
        "--preload-frameworks", "",
        "--no-image-build",
        "--cache", str(repo.parent / "cache"),
    )  # fmt: skip
    assert server.grpc_address, server.log()
    yield server
    server.stop()


def _call(up: UpProcess, n: int) -> dict[str, object]:
    body = json.dumps(
        {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [n]}]}
    ).encode()
    request = urllib.request.Request(
        up.url + "/v2/models/caller/infer", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as resp:
        doc = json.loads(resp.read())
    result: dict[str, object] = json.loads(doc["outputs"][0]["data"][0])
    return result


def _replicas(up: UpProcess, model: str) -> int:
    return len(up.model(model)["replicas"])


def test_a_bls_stream_to_a_decoupled_model_on_another_replica_gets_every_response(
    up: UpProcess,
) -> None:
    assert _replicas(up, "repeat") == 0  # at zero: the activator wakes it for the BLS stream
    result = _call(up, 5)
    # Every response, in order, then the end of the stream: one empty final response, as
    # Triton's iterator ends a decoupled BLS stream.
    assert result == {"values": [0, 1, 2, 3, 4], "empty": 1, "error": None}, up.log()
    assert _replicas(up, "repeat") == 1 and _replicas(up, "caller") == 1
    # Warm now: a longer stream, and one with no responses (only the final flag).
    assert _call(up, 40) == {"values": list(range(40)), "empty": 1, "error": None}
    assert _call(up, 0) == {"values": [], "empty": 1, "error": None}


def test_a_bls_stream_error_comes_back_to_the_model_as_an_error(up: UpProcess) -> None:
    result = _call(up, -2)
    assert result["values"] == [] and "cannot repeat -2 times" in str(result["error"]), result


@pytest.mark.parametrize("code, name", [(-100, "missing"), (-101, "")])
def test_a_bls_call_to_a_model_no_replica_has_reads_as_tritons_not_ready(
    up: UpProcess, code: int, name: str
) -> None:
    # Triton's words, the empty name included ("Model  - ...": it must not cross the front
    # door, whose router would answer its own 404 "Not Found").
    assert _call(up, code)["error"] == (
        f"Model {name} - Error when running inference: Failed for execute the inference "
        f"request. Model '{name}' is not ready."
    )
