"""In its stub process a Python model's file is the module `model` and sys.argv carries no
stub arguments, as in Triton's stub: Triton's qa/python_models/custom_metrics runs
`unittest.main("model", exit=False)` inside `execute`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.http as httpclient

from tests.fixtures.models import python_model
from tests.fixtures.serve_process import ServeProcess, serving

pytestmark = pytest.mark.integration

_UNITTEST_IN_EXECUTE_PY = """
import unittest

import numpy as np
import triton_python_backend_utils as pb_utils


class InModelTest(unittest.TestCase):
    def test_the_model_is_its_own_module(self):
        import model

        self.assertTrue(hasattr(model, "TritonPythonModel"))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for _ in requests:
            test = unittest.main("model", exit=False)  # as Triton's custom_metrics model
            ran = np.array([test.result.testsRun], dtype=np.int32)
            ok = np.array([test.result.wasSuccessful()], dtype=bool)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("RAN", ran), pb_utils.Tensor("OK", ok)]))
        return responses
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("model_module")
    python_model(
        repo,
        "unittest_in_execute",
        'name: "unittest_in_execute"\nbackend: "python"\n'
        'output [ { name: "RAN" data_type: TYPE_INT32 dims: [ 1 ] },\n'
        '         { name: "OK" data_type: TYPE_BOOL dims: [ 1 ] } ]\n',
        _UNITTEST_IN_EXECUTE_PY,
    )
    with serving(repo) as proc:
        yield proc


def test_unittest_main_of_model_runs_the_models_own_tests(server: ServeProcess) -> None:
    with httpclient.InferenceServerClient(server.hostport) as client:
        result = client.infer("unittest_in_execute", [])
    assert result.as_numpy("RAN").tolist() == [1]
    assert result.as_numpy("OK").tolist() == [True]
