"""A Python model's coded error reads the same on `thaw serve` and through `thaw up`, where an
ensemble's step and a BLS call run on another replica, as Triton 2.51 answers it
(docs/triton-http-parity.md, "A thirteenth side by side"):

- an ensemble whose step answered TritonError(..., CANCELLED) answers gRPC's CANCELLED (and
  UNKNOWN, ALREADY_EXISTS: the codes HTTP has no status of its own for), not the
  INVALID_ARGUMENT of the 400 its step crossed replicas with;
- a BLS caller gets the model's own words, without the "Model m - Error when running
  inference: " that goes before a refusal only, and every BLS error's code is INTERNAL, as
  Triton's python backend builds it (an enum value that prints as `__ErrorCode.INTERNAL`);
- a gRPC load or unload of the empty name is refused as any name the repository lacks.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.either_server import TARGETS, start_either
from tests.fixtures.models import make_ensemble, python_model

pytestmark = pytest.mark.integration

# IN = n answers TritonError(<words>, code n); any other value doubles.
_CODED = """
import numpy as np
import triton_python_backend_utils as pb_utils

E = pb_utils.TritonError
CODES = {0: (E.UNKNOWN, "zero unknown"), 3: (E.INVALID_ARG, "three invalid"),
         6: (E.ALREADY_EXISTS, "six exists"), 7: (E.CANCELLED, "seven cancelled")}


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            if int(x[0]) in CODES:
                code, words = CODES[int(x[0])]
                out.append(pb_utils.InferenceResponse(error=E(words, code)))
            else:
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 2)]))
        return out
"""
# OUT: JSON of what its BLS calls to `coded` and `ens` answered (code, printed code, words).
_CALLER = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            got = {}
            for target in ("coded", "ens"):
                request = pb_utils.InferenceRequest(
                    model_name=target, inputs=[pb_utils.Tensor("IN", x)],
                    requested_output_names=["OUT"])
                response = request.exec()
                error = response.error()
                got[target] = [int(error.code()), str(error.code()), error.message()]
            text = np.array([json.dumps(got).encode()], dtype=np.object_)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", text)]))
        return out
"""
_IO = """
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
_STEP = (
    'ensemble_scheduling { step [ { model_name: "coded" model_version: -1 '
    'input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "OUT" } } ] }\n'
)
_WORDS = {0: "zero unknown", 3: "three invalid", 6: "six exists", 7: "seven cancelled"}
# What Triton 2.51 answers a gRPC client of the ensemble (observed).
_ENSEMBLE_CODES = {0: "UNKNOWN", 3: "INVALID_ARGUMENT", 6: "ALREADY_EXISTS", 7: "CANCELLED"}


def _input(value: float) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.float32))
    return tensor


@pytest.mark.parametrize("target", TARGETS)
def test_a_models_coded_error_reads_as_in_triton_on_every_replica(
    target: str, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    python_model(repo, "coded", f'name: "coded"\nbackend: "python"\n{_IO}', _CODED)
    caller_io = _IO.replace('"OUT" data_type: TYPE_FP32', '"OUT" data_type: TYPE_STRING')
    python_model(repo, "caller", f'name: "caller"\nbackend: "python"\n{caller_io}', _CALLER)
    make_ensemble(repo, "ens", f'name: "ens"\nplatform: "ensemble"\n{_IO}{_STEP}')
    server = start_either(target, repo, "--model-control-mode", "explicit", "--load-model", "*")
    try:
        with grpcclient.InferenceServerClient(server.grpc_address) as client:
            for value, code in _ENSEMBLE_CODES.items():
                with pytest.raises(InferenceServerException) as raised:
                    client.infer("ens", [_input(value)])
                assert (raised.value.status(), raised.value.message()) == (
                    f"StatusCode.{code}", f"in ensemble 'ens', {_WORDS[value]}"
                ), target
            for value, words in _WORDS.items():
                answer = client.infer("caller", [_input(value)]).as_numpy("OUT")
                assert json.loads(answer[0]) == {
                    "coded": [1, "__ErrorCode.INTERNAL", words],
                    "ens": [1, "__ErrorCode.INTERNAL", f"in ensemble 'ens', {words}"],
                }, (target, value)
            with pytest.raises(InferenceServerException) as load:
                client.load_model("")
            with pytest.raises(InferenceServerException) as unload:
                client.unload_model("")
    finally:
        server.stop()
    assert (load.value.status(), load.value.message()) == (
        "StatusCode.NOT_FOUND",
        "failed to load '', failed to poll from model repository: no such model in the "
        "repository",
    )
    assert (unload.value.status(), unload.value.message()) == (
        "StatusCode.NOT_FOUND",
        "failed to unload '', model is not in the repository",
    )
