"""What `triton_python_backend_utils` hands a model, as Triton 2.51's python backend does (the
tenth side by side, docs/triton-http-parity.md): input arrays a model may change in place,
input tensors that speak DLPack (`np.from_dlpack(tensor)`), and the requested output names as
a set. The model runs in its stub process (the default, as every Triton Python model does);
DLPack also in the server's process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests

from tests.fixtures.models import python_model
from tests.fixtures.serve_process import ServeProcess, serving

pytestmark = pytest.mark.integration

_PROBE = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "IN")
            array = tensor.as_numpy()
            seen = {"writeable": bool(array.flags["WRITEABLE"])}
            if array.flags["WRITEABLE"]:
                array *= 2  # in place: Triton's input arrays are the model's own
            seen["doubled"] = array.tolist()
            seen["dlpack"] = np.from_dlpack(tensor).tolist()
            seen["requested"] = type(request.requested_output_names()).__name__
            text = json.dumps(seen).encode()
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SEEN", np.array([text], np.object_))]
            ))
        return out
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("python_api")
    for runtime in ("process", "in_process"):
        python_model(
            root,
            f"probe_{runtime}",
            f'name: "probe_{runtime}"\nbackend: "python"\n'
            'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
            'output [ { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
            f'parameters {{ key: "thaw.python_runtime" value: {{ string_value: "{runtime}" }} }}\n',
            _PROBE,
        )
    with serving(Path(root)) as proc:
        yield proc


def _seen(server: ServeProcess, model: str, *, binary: bool) -> dict[str, object]:
    values = [1.0, 2.0, 3.0]
    url = f"{server.url}/v2/models/{model}/infer"
    if binary:  # the input's bytes after the JSON header, as tritonclient sends them
        header = json.dumps(
            {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [3],
                         "parameters": {"binary_data_size": 12}}]}
        ).encode()  # fmt: skip
        response = requests.post(
            url,
            data=header + np.array(values, np.float32).tobytes(),
            headers={"Inference-Header-Content-Length": str(len(header))},
            timeout=60,
        )
    else:
        body = {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [3], "data": values}]}
        response = requests.post(url, json=body, timeout=60)
    assert response.status_code == 200, response.text
    return json.loads(response.json()["outputs"][0]["data"][0])  # type: ignore[no-any-return]


@pytest.mark.parametrize("binary", [False, True])
def test_a_models_input_arrays_are_its_own_to_change(server: ServeProcess, binary: bool) -> None:
    seen = _seen(server, "probe_process", binary=binary)
    assert seen["writeable"] is True
    assert seen["doubled"] == [2.0, 4.0, 6.0]
    assert seen["dlpack"] == [2.0, 4.0, 6.0]  # the tensor's own memory, changed
    assert seen["requested"] == "set"


def test_an_input_tensor_speaks_dlpack_in_the_servers_process_too(server: ServeProcess) -> None:
    # In the server's process a JSON input is an array of its own; a binary one stays a
    # read-only view of the request's body (docs/python-models.md), which DLPack hands out as
    # a copy.
    seen = _seen(server, "probe_in_process", binary=False)
    assert (seen["writeable"], seen["dlpack"]) == (True, [2.0, 4.0, 6.0])
    seen = _seen(server, "probe_in_process", binary=True)
    assert (seen["writeable"], seen["dlpack"]) == (False, [1.0, 2.0, 3.0])
