"""A decoupled Python model whose `execute` returns responses fails its requests with Triton's
text, naming the model instance as Triton does (qa/L0_backend_python/decoupled
`test_decoupled_return_response_error`): "Python model 'NAME_0_0' is using the decoupled mode
and the execute function must return None." (it named the model file)."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.fixtures.models import python_model
from tests.fixtures.serve_process import ServeProcess, serving

pytestmark = pytest.mark.integration

_RETURNS_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("decoupled_return")
    for runtime in ("process", "in_process"):
        name = f"decoupled_returns_{runtime}"
        python_model(
            repo,
            name,
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
            "model_transaction_policy { decoupled: true }\n"
            "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
            'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            f'parameters {{ key: "thaw.python_runtime" value: {{ string_value: "{runtime}" }} }}\n',
            _RETURNS_PY,
        )
    with serving(repo) as proc:
        yield proc


@pytest.mark.parametrize("runtime", ["process", "in_process"])
def test_the_error_names_the_instance(server: ServeProcess, runtime: str) -> None:
    model = f"decoupled_returns_{runtime}"
    answers: queue.Queue[object] = queue.Queue()
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        client.start_stream(lambda result, error: answers.put(error))
        client.async_stream_infer(model, [tensor])
        error = answers.get(timeout=30)
        client.stop_stream()
    assert f"Python model '{model}_0_0' is using the decoupled mode and the execute function " in (
        str(error)
    )
