"""A non-decoupled Python model may answer through the request's response sender and return
None from `execute`, as Triton allows (qa/L0_backend_python/response_sender's
`test_non_decoupled_one_response_pre_return`): the sent response is the request's answer."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.fixtures.models import python_model
from tests.fixtures.serve_process import ServeProcess, serving

pytestmark = pytest.mark.integration

_SENDER_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            request.get_response_sender().send(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUT", data * 2)]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("sender_returns_none")
    python_model(
        repo,
        "sender_returns_none",
        'name: "sender_returns_none"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]\n',
        _SENDER_PY,
    )
    with serving(repo) as proc:
        yield proc


def _input(module, values: np.ndarray):  # type: ignore[no-untyped-def]
    tensor = module.InferInput("IN", list(values.shape), "FP32")
    tensor.set_data_from_numpy(values)
    return tensor


def test_the_sent_response_answers_a_rest_request(server: ServeProcess) -> None:
    values = np.array([[1.5, -2.0]], dtype=np.float32)
    with httpclient.InferenceServerClient(server.hostport) as client:
        result = client.infer("sender_returns_none", [_input(httpclient, values)])
    np.testing.assert_array_equal(result.as_numpy("OUT"), values * 2)


def test_the_sent_response_answers_a_grpc_request(server: ServeProcess) -> None:
    values = np.array([[3.0, 4.0]], dtype=np.float32)
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        result = client.infer("sender_returns_none", [_input(grpcclient, values)])
    np.testing.assert_array_equal(result.as_numpy("OUT"), values * 2)
