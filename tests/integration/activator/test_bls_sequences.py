"""A Python model drives a sequence model by BLS, `correlation_id` and `flags` as in Triton 2.51
(docs/triton-http-parity.md, "A fourteenth side by side"), on `thaw serve` and through
`thaw up` (the target on another replica), its caller in a stub and in process: START and END
flags start and end the sequence, two sequences interleave, a sequence begun over REST goes
on by BLS; a model without sequence batching sees the flags in `flags()`; a correlation ID
that is no uint64 is refused when the request is built, as Triton's binding refuses it."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.either_server import TARGETS, start_either
from tests.fixtures.models import python_model

pytestmark = pytest.mark.integration

# OUT: JSON of the running sum of sequence `correlation_id()`, its flags and controls.
_ACC = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        out = []
        for r in requests:
            x = float(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy().reshape(-1)[0])
            cid = r.correlation_id()
            start = pb_utils.get_input_tensor_by_name(r, "START")
            if start is not None and start.as_numpy().reshape(-1)[0]:
                self.sums[cid] = 0.0
            self.sums[cid] = self.sums.get(cid, 0.0) + x
            seen = {"cid": cid, "flags": r.flags(), "sum": self.sums[cid]}
            text = np.array([json.dumps(seen).encode()], dtype=np.object_)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", text)]))
        return out
"""
# SPEC: JSON {model, x, and InferenceRequest's correlation_id / flags}; OUT: what came back.
_CALLER = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            spec = json.loads(pb_utils.get_input_tensor_by_name(r, "SPEC").as_numpy()[0])
            kwargs = {k: spec[k] for k in ("correlation_id", "flags") if k in spec}
            try:
                response = pb_utils.InferenceRequest(
                    model_name=spec["model"], requested_output_names=["OUT"],
                    inputs=[pb_utils.Tensor("IN", np.array([[spec["x"]]], dtype=np.float32))],
                    **kwargs).exec()
            except RuntimeError as exc:
                got = {"raised": str(exc)}
            else:
                if response.has_error():
                    got = {"error": response.error().message()}
                else:
                    answer = pb_utils.get_output_tensor_by_name(response, "OUT")
                    got = json.loads(answer.as_numpy()[0])
            text = np.array([json.dumps(got).encode()], dtype=np.object_)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", text)]))
        return out
"""
# Two batch slots (max_batch_size 2): a second sequence never waits for the first one's end.
_SEQUENCE = """
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] }
  ]
}
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
_ACC_IO = """
max_batch_size: 2
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
_CALLER_IO = """
input [ { name: "SPEC" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
_START, _END = 1, 2


def _runtime(runtime: str) -> str:
    return f'parameters {{ key: "thaw.python_runtime" value: {{ string_value: "{runtime}" }} }}\n'


def _post(url: str, model: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        f"{url}/v2/models/{model}/infer", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=120) as resp:
        outputs = json.loads(resp.read())["outputs"]
    return dict(json.loads(outputs[0]["data"][0]))


def _bls(url: str, caller: str, **spec: object) -> dict[str, object]:
    text = json.dumps(spec)
    return _post(url, caller, {"inputs": [
        {"name": "SPEC", "datatype": "BYTES", "shape": [1], "data": [text]}
    ]})  # fmt: skip


@pytest.mark.parametrize("target", TARGETS)
def test_a_bls_caller_drives_sequences_with_correlation_id_and_flags(
    target: str, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    python_model(repo, "acc", f'name: "acc"\nbackend: "python"\n{_ACC_IO}{_SEQUENCE}', _ACC)
    python_model(repo, "plain", f'name: "plain"\nbackend: "python"\n{_ACC_IO}', _ACC)
    for runtime in ("process", "in_process"):
        name = f"caller_{runtime}"
        config = f'name: "{name}"\nbackend: "python"\n{_CALLER_IO}{_runtime(runtime)}'
        python_model(repo, name, config, _CALLER)
    server = start_either(target, repo)
    try:
        for runtime in ("process", "in_process"):
            caller = f"caller_{runtime}"
            where = (target, runtime)
            assert _bls(server.url, caller, model="acc", x=1, correlation_id=5, flags=_START) == {
                "cid": 5, "flags": _START, "sum": 1.0
            }, where  # fmt: skip
            assert _bls(server.url, caller, model="acc", x=10, correlation_id=6, flags=_START)[
                "sum"
            ] == 10.0, where
            assert _bls(server.url, caller, model="acc", x=2, correlation_id=5) == {
                "cid": 5, "flags": 0, "sum": 3.0
            }, where  # fmt: skip
            assert _bls(server.url, caller, model="acc", x=3, correlation_id=5, flags=_END) == {
                "cid": 5, "flags": _END, "sum": 6.0
            }, where  # fmt: skip
            ended = _bls(server.url, caller, model="acc", x=1, correlation_id=5)
            assert ended == {
                "error": "Model acc - Error when running inference: inference request for "
                "sequence 5 to model 'acc' must specify the START flag on the first request of "
                "the sequence"
            }, where
            # begun over REST, continued by BLS, ended over REST
            rest = {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, 1], "data": [1]}]}
            params = {"sequence_id": 40, "sequence_start": True}
            assert _post(server.url, "acc", {**rest, "parameters": params})["sum"] == 1.0
            assert _bls(server.url, caller, model="acc", x=2, correlation_id=40)["sum"] == 3.0
            params = {"sequence_id": 40, "sequence_end": True}
            assert _post(server.url, "acc", {**rest, "parameters": params})["sum"] == 4.0
            assert _bls(server.url, caller, model="acc", x=20, correlation_id=6, flags=_END)[
                "sum"
            ] == 30.0, where
            # no sequence batching: the flags reach `flags()` all the same
            both = _bls(server.url, caller, model="plain", x=1, flags=_START | _END)
            assert (both["cid"], both["flags"]) == (0, _START | _END), where
            refused = _bls(server.url, caller, model="acc", x=1, correlation_id=-1)
            assert refused == {
                "raised": "Unable to cast Python instance to C++ type (#define "
                "PYBIND11_DETAILED_ERROR_MESSAGES or compile in debug mode for details)"
            }, where
    finally:
        server.stop()
