"""A Python sequence model reads Triton's request flags: `request.flags()` is SEQUENCE_START on
a sequence's first request, SEQUENCE_END on its last, both on a one-request sequence, 0 between
(qa/python_models/sequence_py, L0_sequence_batcher's preserve-ordering tests, keys its
sequences on them; they were always 0). In a stub process and in process, over HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fixtures.models import python_model
from tests.fixtures.serve_process import ServeProcess, serving

pytestmark = pytest.mark.integration

_FLAGS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("FLAGS", np.array([r.flags()], np.int32)),
                pb_utils.Tensor("CORRID", np.array([r.correlation_id()], np.int32)),
            ])
            for r in requests
        ]
"""

_RUNTIMES = ("process", "in_process")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("sequence_flags")
    for runtime in _RUNTIMES:
        name = f"flags_{runtime}"
        python_model(
            repo,
            name,
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
            "sequence_batching { }\n"
            "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
            'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            'output [ { name: "FLAGS" data_type: TYPE_INT32 dims: [ 1 ] },\n'
            '         { name: "CORRID" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            f'parameters {{ key: "thaw.python_runtime" value: {{ string_value: "{runtime}" }} }}\n',
            _FLAGS_PY,
        )
    with serving(repo) as proc:
        yield proc


@pytest.mark.parametrize("runtime", _RUNTIMES)
def test_flags_mark_a_sequences_start_and_end(server: ServeProcess, runtime: str) -> None:
    client = httpclient.InferenceServerClient(server.hostport)
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))

    def flags(sequence: int, **marks: bool) -> tuple[int, int]:
        result = client.infer(f"flags_{runtime}", [tensor], sequence_id=sequence, **marks)
        return int(result.as_numpy("FLAGS")[0]), int(result.as_numpy("CORRID")[0])

    assert flags(5, sequence_start=True) == (1, 5)
    assert flags(5) == (0, 5)
    assert flags(5, sequence_end=True) == (2, 5)
    assert flags(6, sequence_start=True, sequence_end=True) == (3, 6)
