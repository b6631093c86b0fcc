"""`thaw up --http-header-forward-pattern` / `--grpc-header-forward-pattern`, as on `thaw serve`
(Triton's L0_parameters): a header (gRPC metadata) whose name matches reaches the model as a
string parameter of the request, at zero (the request that wakes the model) and warm (a
connection handed to the replica); one that does not match never does."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.fixtures.models import python_model
from tests.fixtures.up_process import UpProcess, light_args, with_params

pytestmark = pytest.mark.integration

_ECHO_PARAMETERS_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "PARAMS", np.array([r.parameters()], dtype=object))])
            for r in requests
        ]
"""


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("header_forward_repo")
    model = python_model(
        repo,
        "echo_parameters",
        'name: "echo_parameters"\nbackend: "python"\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]\n',
        _ECHO_PARAMETERS_PY,
    )
    with_params(model, scale_to_zero_grace_s=300)
    server = UpProcess(
        repo,
        *light_args(repo),
        "--http-header-forward-pattern", "my_header.*",
        "--grpc-header-forward-pattern", "my_grpc.*",
    )  # fmt: skip
    yield server
    server.stop()


def _parameters(module, client, headers: dict[str, str]) -> dict[str, object]:  # type: ignore[no-untyped-def]
    tensor = module.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.ones([1], dtype=np.float32))
    result = client.infer("echo_parameters", [tensor], headers=headers)
    return dict(json.loads(result.as_numpy("PARAMS")[0]))


def test_http_headers_that_match_reach_the_model_at_zero_and_warm(up: UpProcess) -> None:
    assert up.model("echo_parameters")["replicas_desired"] == 0
    headers = {"My_Header_A": "a value", "other_header": "no"}
    for _ in range(2):  # the request that wakes the model, then one on a warm model
        with httpclient.InferenceServerClient(up.hostport) as client:
            params = _parameters(httpclient, client, headers)
        assert params.get("my_header_a", params.get("My_Header_A")) == "a value"
        assert not any(key.lower() == "other_header" for key in params)


def test_grpc_metadata_that_matches_reaches_the_model(up: UpProcess) -> None:
    with grpcclient.InferenceServerClient(up.grpc_address) as client:
        params = _parameters(grpcclient, client, {"my_grpc_b": "b value", "my_header_c": "no"})
    assert params["my_grpc_b"] == "b value"
    assert "my_header_c" not in params  # the HTTP pattern is not gRPC's
