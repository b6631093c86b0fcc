"""A Python model's `pb_utils.TritonError(message=..., code=...)` leaves with its code, as in
Triton (qa/L0_backend_python/lifecycle's `test_error_code`, v2.51.0): over gRPC each code's own
status (UNSUPPORTED as UNIMPLEMENTED, INVALID_ARG as INVALID_ARGUMENT, ...), over REST the
status Triton's `HttpCodeFromError` gives it (400 for the codes REST has none for), the model's
message unchanged; a TritonError without a code is INTERNAL.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import python_model
from tests.fixtures.serve_process import ServeProcess, serving

pytestmark = pytest.mark.integration

_ERROR_CODE_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            name = pb_utils.get_input_tensor_by_name(request, "CODE").as_numpy()[0].decode()
            if name == "(default)":
                error = pb_utils.TritonError("no code: " + name)
            else:
                error = pb_utils.TritonError(
                    message="code: " + name, code=getattr(pb_utils.TritonError, name)
                )
            responses.append(pb_utils.InferenceResponse(error=error))
        return responses
"""

# (pb_utils code, gRPC status, REST status), as Triton 2.51 answers them.
CODES = [
    ("UNKNOWN", "StatusCode.UNKNOWN", 400),
    ("INTERNAL", "StatusCode.INTERNAL", 500),
    ("NOT_FOUND", "StatusCode.NOT_FOUND", 404),
    ("INVALID_ARG", "StatusCode.INVALID_ARGUMENT", 400),
    ("UNAVAILABLE", "StatusCode.UNAVAILABLE", 503),
    ("UNSUPPORTED", "StatusCode.UNIMPLEMENTED", 501),
    ("ALREADY_EXISTS", "StatusCode.ALREADY_EXISTS", 400),
    ("CANCELLED", "StatusCode.CANCELLED", 400),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("error_codes")
    python_model(
        repo,
        "error_code",
        'name: "error_code"\nbackend: "python"\n'
        'input [ { name: "CODE" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]\n',
        _ERROR_CODE_PY,
    )
    with serving(repo) as proc:
        yield proc


def _input(module, name: str):  # type: ignore[no-untyped-def]
    tensor = module.InferInput("CODE", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([name.encode()], dtype=np.object_))
    return tensor


@pytest.mark.parametrize(("code", "grpc_status", "http_status"), CODES)
def test_a_models_error_code_is_its_grpc_status(
    server: ServeProcess, code: str, grpc_status: str, http_status: int
) -> None:
    with (
        grpcclient.InferenceServerClient(server.grpc_address) as client,
        pytest.raises(InferenceServerException) as caught,
    ):
        client.infer("error_code", [_input(grpcclient, code)])
    assert caught.value.status() == grpc_status
    assert caught.value.message() == f"code: {code}"


@pytest.mark.parametrize(("code", "grpc_status", "http_status"), CODES)
def test_a_models_error_code_is_tritons_rest_status(
    server: ServeProcess, code: str, grpc_status: str, http_status: int
) -> None:
    with (
        httpclient.InferenceServerClient(server.hostport) as client,
        pytest.raises(InferenceServerException) as caught,
    ):
        client.infer("error_code", [_input(httpclient, code)])
    assert caught.value.status() == str(http_status)
    assert caught.value.message() == f"code: {code}"


def test_an_error_without_a_code_is_internal(server: ServeProcess) -> None:
    with (
        grpcclient.InferenceServerClient(server.grpc_address) as client,
        pytest.raises(InferenceServerException) as caught,
    ):
        client.infer("error_code", [_input(grpcclient, "(default)")])
    assert caught.value.status() == "StatusCode.INTERNAL"
    assert caught.value.message() == "no code: (default)"
