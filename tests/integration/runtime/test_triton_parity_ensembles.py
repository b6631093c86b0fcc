"""Ensembles of Python models, the response cache and a decoupled model's failures, as Triton
2.51 answers them (the ninth side by side, docs/triton-http-parity.md): a composing model's
cached answer serves the ensemble's step too, an ensemble with a decoupled step is decoupled,
a decoupled model's failed `execute` is worded as any model's, a step's CANCELLED stays
CANCELLED, and a model's error read over generate_stream shows no directory of the server.
Python models run in their stubs (the default) and in the server's process.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import python_model, write_config
from tests.fixtures.serve_process import ServeProcess, serving

pytestmark = pytest.mark.integration

RUNTIMES = ["process", "in_process"]

# OUT = IN + the number of executes so far: an answer from the cache shows an older count.
_COUNTING = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.executes = 0

    def execute(self, requests):
        out = []
        for request in requests:
            self.executes += 1
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if x[0] < 0:
                error = pb_utils.TritonError("negative", pb_utils.TritonError.CANCELLED)
                out.append(pb_utils.InferenceResponse(error=error))
                continue
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", x + np.float32(self.executes))]
            ))
        return out
"""

# Sends IN[0] responses, or raises when IN[0] < 0.
_DECOUPLED = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if x[0] < 0:
                raise ValueError("dec raised")
            sender = request.get_response_sender()
            for i in range(int(x[0])):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x + i)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

_IO = (
    'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
)


def _python(root: Path, name: str, runtime: str, source: str, extra: str = "") -> None:
    config = (
        f'name: "{name}"\nbackend: "python"\n{_IO}{extra}'
        f'parameters {{ key: "thaw.python_runtime" value: {{ string_value: "{runtime}" }} }}\n'
    )
    python_model(root, name, config, source)


def _ensemble(root: Path, name: str, step: str, extra: str = "") -> None:
    (root / name / "1").mkdir(parents=True)
    write_config(
        root / name,
        f'name: "{name}"\nplatform: "ensemble"\n{extra}'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        "ensemble_scheduling { step [ { "
        f'model_name: "{step}" model_version: -1 '
        'input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "Y" } } ] }\n',
    )


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ensembles")
    for runtime in RUNTIMES:
        _python(root, f"cached_{runtime}", runtime, _COUNTING, "response_cache { enable: true }\n")
        _ensemble(root, f"ens_cached_{runtime}", f"cached_{runtime}")
        _python(root, f"dec_{runtime}", runtime, _DECOUPLED,
                "model_transaction_policy { decoupled: true }\n")  # fmt: skip
        _ensemble(root, f"ens_dec_{runtime}", f"dec_{runtime}")
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServeProcess]:
    with serving(repo, "--cache-config", "local,size=1048576") as proc:
        yield proc


def _infer(server: ServeProcess, model: str, value: float, name: str = "X") -> requests.Response:
    body = {"inputs": [{"name": name, "datatype": "FP32", "shape": [1], "data": [value]}]}
    return requests.post(f"{server.url}/v2/models/{model}/infer", json=body, timeout=60)


def _inference_stats(server: ServeProcess, model: str) -> dict[str, Any]:
    response = requests.get(f"{server.url}/v2/models/{model}/stats", timeout=30)
    return response.json()["model_stats"][0]["inference_stats"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_an_ensemble_step_is_answered_from_its_models_cache(
    server: ServeProcess, runtime: str
) -> None:
    # The client's own request named no output; the step names the one it maps. Both hold
    # the model's one output, so both share one cached answer, as in Triton.
    model = f"cached_{runtime}"
    first = _infer(server, model, 5.0, name="IN")
    assert first.status_code == 200, first.text
    answered = first.json()["outputs"][0]["data"]
    hits = _inference_stats(server, model)["cache_hit"]["count"]
    through = _infer(server, f"ens_cached_{runtime}", 5.0)
    assert through.status_code == 200, through.text
    assert through.json()["outputs"][0]["data"] == answered  # no new execute: an older count
    assert _inference_stats(server, model)["cache_hit"]["count"] == hits + 1


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_failed_request_counts_as_a_cache_miss(server: ServeProcess, runtime: str) -> None:
    model = f"cached_{runtime}"
    misses = _inference_stats(server, model)["cache_miss"]["count"]
    assert _infer(server, model, -1.0, name="IN").status_code == 400
    assert _infer(server, model, -1.0, name="IN").status_code == 400  # an error is not kept
    assert _inference_stats(server, model)["cache_miss"]["count"] == misses + 2


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_steps_cancelled_error_stays_cancelled_over_grpc(
    server: ServeProcess, runtime: str
) -> None:
    tensor = grpcclient.InferInput("X", [1], "FP32")
    tensor.set_data_from_numpy(np.array([-3.0], np.float32))  # new bytes: not a cache hit
    with pytest.raises(InferenceServerException) as raised:
        grpcclient.InferenceServerClient(server.grpc_address).infer(
            f"ens_cached_{runtime}", [tensor]
        )
    assert raised.value.status() == "StatusCode.CANCELLED"
    assert raised.value.message() == f"in ensemble 'ens_cached_{runtime}', negative"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_an_ensemble_with_a_decoupled_step_is_decoupled(
    server: ServeProcess, runtime: str
) -> None:
    model = f"ens_dec_{runtime}"
    config = requests.get(f"{server.url}/v2/models/{model}/config", timeout=30).json()
    assert config["model_transaction_policy"] == {"decoupled": True}
    refused = _infer(server, model, 2.0)
    assert refused.status_code == 501
    assert refused.json() == {
        "error": "HTTP end point doesn't support models with decoupled transaction policy"
    }
    tensor = grpcclient.InferInput("X", [1], "FP32")
    tensor.set_data_from_numpy(np.array([2.0], np.float32))
    client = grpcclient.InferenceServerClient(server.grpc_address)
    with pytest.raises(InferenceServerException) as raised:
        client.infer(model, [tensor])
    assert raised.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "ModelInfer RPC doesn't support models with decoupled" in str(raised.value.message())
    assert [a for a, _ in _stream(server, model, 2.0)] == [[2.0], [3.0]]


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("through_ensemble", [False, True])
def test_a_decoupled_models_failed_execute_is_worded_as_any_models(
    server: ServeProcess, runtime: str, through_ensemble: bool
) -> None:
    model = f"ens_dec_{runtime}" if through_ensemble else f"dec_{runtime}"
    prefix = f"in ensemble '{model}', " if through_ensemble else ""
    expected = (
        f"{prefix}Failed to process the request(s) for model 'dec_{runtime}_0', message: "
        f"ValueError: dec raised\n\nAt:\n  dec_{runtime}/1/model.py(9): execute\n"
    )
    assert _stream(server, model, -1.0) == [(None, expected)]
    # generate_stream: the same text, the server's directories left out as in every error body
    response = requests.post(
        f"{server.url}/v2/models/{model}/generate_stream",
        json={"X" if through_ensemble else "IN": [-1.0]},
        timeout=60,
    )
    assert response.text == f"data: {json.dumps({'error': expected}, separators=(',', ':'))}\n\n"
    assert str(server.repo) not in response.text


def _stream(server: ServeProcess, model: str, value: float) -> list[tuple[Any, str | None]]:
    """Each response of one streamed request: (its Y or OUT values, None) or (None, error)."""
    answers: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_address)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    name = "X" if model.startswith("ens_") else "IN"
    tensor = grpcclient.InferInput(name, [1], "FP32")
    tensor.set_data_from_numpy(np.array([value], np.float32))
    try:
        client.async_stream_infer(model, [tensor], enable_empty_final_response=True)
        seen: list[tuple[Any, str | None]] = []
        while True:
            result, error = answers.get(timeout=60)
            if error is not None:
                seen.append((None, error.message()))
                return seen
            response = result.get_response()
            if response.outputs:
                out = "Y" if name == "X" else "OUT"
                seen.append((result.as_numpy(out).tolist(), None))
            if response.parameters["triton_final_response"].bool_param:
                return seen
    finally:
        client.stop_stream()
