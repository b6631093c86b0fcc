"""An explicit load of a model that is loaded and unchanged loads it again, on `thaw serve` and
through `thaw up`, as Triton 2.51 does (docs/triton-http-parity.md, "A twelfth side by side"):
its `initialize` runs again, so a model that reads something outside its directory (here a
file named in its config) picks up the change. A load of an ensemble does not load again the
steps it runs."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.either_server import TARGETS, start_either
from tests.fixtures.models import make_ensemble, python_model

pytestmark = pytest.mark.integration

# OUT = the number in the file its config's parameter `source` names, read in `initialize`.
_READS_AT_INIT = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        source = json.loads(args["model_config"])["parameters"]["source"]["string_value"]
        with open(source) as f:
            self.value = float(f.read())

    def execute(self, requests):
        out = np.array([self.value], dtype=np.float32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]) for _ in requests]
"""
_IO = """
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def _post(url: str, path: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=120) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else {}


def _value(url: str, model: str) -> float:
    body = {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1], "data": [0.0]}]}
    outputs = _post(url, f"/v2/models/{model}/infer", body)["outputs"]
    return float(outputs[0]["data"][0])  # type: ignore[index]


@pytest.mark.parametrize("target", TARGETS)
def test_a_load_of_an_unchanged_model_runs_its_initialize_again(
    target: str, tmp_path: Path
) -> None:
    source = tmp_path / "value.txt"
    source.write_text("1")
    repo = tmp_path / "repo"
    config = (
        f'name: "reader"\nbackend: "python"\n{_IO}'
        f'parameters {{ key: "source" value: {{ string_value: "{source}" }} }}\n'
    )
    python_model(repo, "reader", config, _READS_AT_INIT)
    steps = (
        'ensemble_scheduling { step [ { model_name: "reader" model_version: -1 '
        'input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "OUT" } } ] }\n'
    )
    make_ensemble(repo, "ens", f'name: "ens"\nplatform: "ensemble"\n{_IO}{steps}')
    server = start_either(target, repo, "--model-control-mode", "explicit", "--load-model", "*")
    try:
        assert (_value(server.url, "reader"), _value(server.url, "ens")) == (1.0, 1.0)
        source.write_text("2")
        _post(server.url, "/v2/repository/models/reader/load", {})
        assert (_value(server.url, "reader"), _value(server.url, "ens")) == (2.0, 2.0)
        source.write_text("3")  # the ensemble's load leaves its loaded step as it is
        _post(server.url, "/v2/repository/models/ens/load", {})
        assert (_value(server.url, "reader"), _value(server.url, "ens")) == (2.0, 2.0)
    finally:
        server.stop()
