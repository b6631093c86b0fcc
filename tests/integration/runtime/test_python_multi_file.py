"""A Python model made of several files imports its siblings as in Triton's stub, where the
model file is a module of a package that is its version folder: `import helper` and
`from . import sibling` (Triton's qa/python_models/multi_file). Two models with a sibling of the
same name each get their own, in a stub process and in process."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fixtures.models import python_model
from tests.fixtures.serve_process import ServeProcess, serving

pytestmark = pytest.mark.integration

_MODEL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

import helper
from . import sibling


class TritonPythonModel:
    def execute(self, requests):
        value = np.array([helper.VALUE + sibling.VALUE], np.int32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]) for _ in requests]
"""

_RUNTIMES = ("process", "in_process")


def _config(name: str, runtime: str) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        f'parameters {{ key: "thaw.python_runtime" value: {{ string_value: "{runtime}" }} }}\n'
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("multi_file")
    for runtime in _RUNTIMES:
        for index, (helper, sibling) in enumerate(((1, 10), (2, 20))):
            name = f"multi_{runtime}_{index}"
            model = python_model(repo, name, _config(name, runtime), _MODEL_PY)
            # Absolute sibling imports stay per process (as Triton's, one stub per instance):
            # only the stub models may both say `import helper` with different files.
            if runtime == "process" or index == 0:
                (model / "1" / "helper.py").write_text(f"VALUE = {helper}\n")
            else:
                (model / "1" / "helper.py").write_text("VALUE = 1\n")
            (model / "1" / "sibling.py").write_text(f"VALUE = {sibling}\n")
    with serving(repo) as proc:
        yield proc


@pytest.mark.parametrize("runtime", _RUNTIMES)
def test_a_model_imports_its_sibling_files_both_ways(server: ServeProcess, runtime: str) -> None:
    client = httpclient.InferenceServerClient(server.hostport)
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([0], np.int32))
    got = [int(client.infer(f"multi_{runtime}_{i}", [tensor]).as_numpy("OUT")[0]) for i in (0, 1)]
    # Each model's own `sibling` (relative import: the tens), never the other model's. In a
    # stub each model's own `helper` too (the ones); in process `import helper` is whichever
    # the server process imported first (auto-complete imports stub models' files there too).
    if runtime == "process":
        assert got == [11, 22]
    else:
        assert [value // 10 for value in got] == [1, 2]
