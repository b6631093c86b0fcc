"""An ensemble's optional inputs and the outputs a step does not return, in a real `thaw serve`,
as Triton 2.51 runs them (qa/L0_optional_input; tests/conformance/qa_more_suites.py runs it).

An optional ensemble input the request lacks, and a mapped output a step does not return, are
absent: the steps that read them run without them, and an absent ensemble output is left out
of the response.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.fixtures import models
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

_IO = """
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 1 ] optional: true } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""

# Each requested OUTPUT<n> is INPUT<n>, or zeros when that input is absent (Triton's identity
# backend on an optional input).
_PRESENT_OR_ZEROS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            batch = request.inputs()[0].as_numpy().shape[0]
            outputs = []
            for name in request.requested_output_names():
                given = pb_utils.get_input_tensor_by_name(request, "INPUT" + name[6:])
                data = given.as_numpy() if given is not None else np.zeros((batch, 1), np.float32)
                outputs.append(pb_utils.Tensor(name, data))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

# Only the outputs of the inputs it was given.
_ONLY_GIVEN = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT" + t.name()[5:], t.as_numpy()) for t in r.inputs()
            ])
            for r in requests
        ]
"""


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += " " + " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: -1 {maps} }}'


_BOTH = {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo: Path = tmp_path_factory.mktemp("optional_ensembles")
    models.python_model(repo, "present_or_zeros", 'backend: "python"' + _IO, _PRESENT_OR_ZEROS)
    models.python_model(repo, "only_given", 'backend: "python"' + _IO, _ONLY_GIVEN)
    passing = _step("present_or_zeros", _BOTH, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"})
    connecting = [
        _step("only_given", _BOTH, {"OUTPUT0": "mid0", "OUTPUT1": "mid1"}),
        _step(
            "only_given",
            {"INPUT0": "mid0", "INPUT1": "mid1"},
            {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"},
        ),
    ]
    for name, steps in (("optional_pass", [passing]), ("connecting", connecting)):
        models.make_ensemble(
            repo,
            name,
            f'platform: "ensemble"{_IO}ensemble_scheduling {{ step [ {", ".join(steps)} ] }}',
        )
    proc = ServeProcess(repo)
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def _input(name: str, value: float) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, [1, 1], "FP32")
    tensor.set_data_from_numpy(np.full((1, 1), value, np.float32))
    return tensor


def _outputs(*names: str) -> list[grpcclient.InferRequestedOutput]:
    return [grpcclient.InferRequestedOutput(n) for n in names]


def test_an_optional_ensemble_input_the_request_lacks_is_left_out_of_the_step(
    server: ServeProcess,
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_address)
    result = client.infer(
        "optional_pass", [_input("INPUT1", 5.0)], outputs=_outputs("OUTPUT0", "OUTPUT1")
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [[0.0]])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), [[5.0]])


def test_an_output_a_step_does_not_return_is_absent_downstream(server: ServeProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_address)
    result = client.infer("connecting", [_input("INPUT0", 3.0)], outputs=_outputs("OUTPUT0"))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [[3.0]])
    result = client.infer("connecting", [_input("INPUT0", 3.0)])
    assert result.as_numpy("OUTPUT1") is None  # never made: left out, as Triton does


def test_a_requested_output_the_model_did_not_return_is_left_out(server: ServeProcess) -> None:
    # Triton 2.51 answers with the outputs the model returned (qa/L0_optional_input's
    # optional_identity, asked for both through an ensemble step under `thaw up`).
    grpc = grpcclient.InferenceServerClient(server.grpc_address)
    result = grpc.infer(
        "only_given", [_input("INPUT0", 2.0)], outputs=_outputs("OUTPUT0", "OUTPUT1")
    )
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT0"]
    http = httpclient.InferenceServerClient(server.hostport)
    tensor = httpclient.InferInput("INPUT0", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.full((1, 1), 2.0, np.float32))
    answer = http.infer(
        "only_given",
        [tensor],
        outputs=[httpclient.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")],
    )
    assert [o["name"] for o in answer.get_response()["outputs"]] == ["OUTPUT0"]
