"""What a Python model's answers look like to its clients, as Triton 2.51 shows them (the sixth
side by side, docs/triton-http-parity.md): the "At:" lines of an exception its `execute` raised,
an output its config does not declare, an error response sent without the final flag (the
stream goes on, over gRPC, generate_stream and a BLS stream), the arrays and parameters a
model is handed, and the generate extension's answers. Each runs with the model in its stub
process (the default) and in the server's process.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.midstream_model import (
    GRPC_ANSWERS,
    grpc_stream_answers,
    make_midstream_error,
    midstream_events,
)
from tests.fixtures.models import python_model
from tests.fixtures.serve_process import ServeProcess, serving

pytestmark = pytest.mark.integration

RUNTIMES = ["process", "in_process"]

_RAISER = """
import numpy as np
import triton_python_backend_utils as pb_utils


def helper(value):
    raise RuntimeError(f"boom {value}")


def deeper(depth):
    return deeper(depth + 1)


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            if value == 1:
                helper(value)
            if value == 2:
                deeper(0)
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([value], np.int32)),
                pb_utils.Tensor("EXTRA", np.array([7], np.int32)),
            ]))
        return out
"""

_BLS_READER = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="midstream_process",
                inputs=[pb_utils.Tensor("text_input", np.array([b"x"], np.object_))],
                requested_output_names=["text_output"],
            )
            seen = []
            for response in call.exec(decoupled=True):
                if response.has_error():
                    seen.append("error:" + response.error().message())
                elif response.output_tensors():
                    tensor = pb_utils.get_output_tensor_by_name(response, "text_output")
                    seen.append(tensor.as_numpy()[0].decode())
            text = "|".join(seen).encode()
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SEEN", np.array([text], np.object_))]
            ))
        return out
"""

_HANDED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            array = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            text = f"{array.dtype!r} {request.parameters()}".encode()
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SEEN", np.array([text], np.object_))]
            ))
        return out
"""


# BLS calls whose answers Triton 2.51's python backend words in its own way; each case's
# outcome as text: "OK:<outputs>", "ERR:<message>" (a response with an error) or "RAISED:...".
_BLS_CASES = """
import numpy as np
import triton_python_backend_utils as pb_utils


def call(case):
    tensor = pb_utils.Tensor("IN", np.array([case == 2], np.int32))
    kwargs = dict(model_name="raiser_process", inputs=[tensor], requested_output_names=["OUT"])
    if case == 0:
        kwargs["model_name"] = "missing"
    elif case == 1:
        kwargs["inputs"] = [pb_utils.Tensor("X", np.array([0], np.int32))]
    elif case == 3:
        kwargs.update(model_name="midstream_process", requested_output_names=["text_output"],
                      inputs=[pb_utils.Tensor("text_input", np.array([b"x"], np.object_))])
    elif case == 4:
        kwargs["parameters"] = {"x": [1]}
    elif case == 5:
        kwargs["requested_output_names"] = ["OUT", "OUT"]
    elif case == 6:
        kwargs["model_name"] = ""
    try:
        response = pb_utils.InferenceRequest(**kwargs).exec()
    except pb_utils.TritonModelException as exc:
        return "RAISED:" + exc.message()
    if response.has_error():
        return "ERR:" + response.error().message()
    return "OK:" + ",".join(t.name() for t in response.output_tensors())


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            case = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SEEN", np.array([call(case).encode()], np.object_))]
            ))
        return out
"""


def _config(name: str, runtime: str, io: str) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\n{io}'
        f'parameters {{ key: "thaw.python_runtime" value: {{ string_value: "{runtime}" }} }}\n'
    )


_INT_IN = 'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
_SEEN_OUT = 'output [ { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] } ]\n'


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python_answers")
    for runtime in RUNTIMES:
        out = 'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        python_model(
            root, f"raiser_{runtime}", _config(f"raiser_{runtime}", runtime, _INT_IN + out), _RAISER
        )
        make_midstream_error(root, f"midstream_{runtime}", runtime)
        name = f"bls_reader_{runtime}"
        python_model(root, name, _config(name, runtime, _INT_IN + _SEEN_OUT), _BLS_READER)
        name = f"handed_{runtime}"
        python_model(root, name, _config(name, runtime, _INT_IN + _SEEN_OUT), _HANDED)
        name = f"bls_cases_{runtime}"
        python_model(root, name, _config(name, runtime, _INT_IN + _SEEN_OUT), _BLS_CASES)
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServeProcess]:
    with serving(repo) as proc:
        yield proc


def _infer(server: ServeProcess, model: str, body: dict[str, Any]) -> requests.Response:
    return requests.post(f"{server.url}/v2/models/{model}/infer", json=body, timeout=60)


def _int_body(value: int, **extra: Any) -> dict[str, Any]:
    return {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [value]}], **extra}


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_an_exception_from_execute_carries_tritons_at_lines(
    server: ServeProcess, runtime: str
) -> None:
    # Triton's stub (pybind11) writes the frames deepest first; the repository's directory is
    # cut from what a client reads (thawserver.redaction), so the path is the model's own.
    model = f"raiser_{runtime}"
    response = _infer(server, model, _int_body(1))
    assert response.status_code == 500
    path = f"{model}/1/model.py"
    assert response.json()["error"] == (
        f"Failed to process the request(s) for model '{model}_0', message: RuntimeError: boom 1"
        f"\n\nAt:\n  {path}(6): helper\n  {path}(19): execute\n"
    )
    client = grpcclient.InferenceServerClient(server.grpc_address)
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))
    with pytest.raises(InferenceServerException) as raised:
        client.infer(model, [tensor])
    assert raised.value.message().endswith(f"At:\n  {path}(6): helper\n  {path}(19): execute\n")


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_deep_trace_is_listed_at_both_ends_only(server: ServeProcess, runtime: str) -> None:
    model = f"raiser_{runtime}"
    response = _infer(server, model, _int_body(2))  # recursion until RecursionError
    assert response.status_code == 500
    message = response.json()["error"]
    assert "message: RecursionError: maximum recursion depth exceeded" in message
    lines = message.split("\n\nAt:\n")[1].splitlines()
    assert len(lines) == 65  # 32 deepest, a count of the others, 32 outermost
    assert lines[0] == f"  {model}/1/model.py(10): deeper"
    assert re.fullmatch(r"  \.\.\. \d+ more frames", lines[32])
    assert lines[-2:] == [f"  {model}/1/model.py(10): deeper", f"  {model}/1/model.py(21): execute"]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_an_output_the_config_does_not_declare_is_not_answered(
    server: ServeProcess, runtime: str
) -> None:
    model = f"raiser_{runtime}"
    response = _infer(server, model, _int_body(0))
    assert response.status_code == 200, response.text
    assert [o["name"] for o in response.json()["outputs"]] == ["OUT"]
    client = grpcclient.InferenceServerClient(server.grpc_address)
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([0], np.int32))
    answer = client.infer(model, [tensor]).get_response()
    assert [o.name for o in answer.outputs] == ["OUT"]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_an_error_sent_without_the_final_flag_ends_no_stream(
    server: ServeProcess, runtime: str
) -> None:
    model = f"midstream_{runtime}"
    assert grpc_stream_answers(server.grpc_address, model) == GRPC_ANSWERS
    response = requests.post(
        f"{server.url}/v2/models/{model}/generate_stream", json={"text_input": "x"}, timeout=60
    )
    assert response.status_code == 200
    assert response.text == midstream_events(model)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_an_error_sent_without_the_final_flag_does_not_end_a_bls_stream(
    server: ServeProcess, runtime: str
) -> None:
    response = _infer(server, f"bls_reader_{runtime}", _int_body(0))
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == ["tok0|error:mid err|tok1"]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_model_is_handed_native_arrays_and_its_parameters_unescaped(
    server: ServeProcess, runtime: str
) -> None:
    for binary in (False, True):
        body = _int_body(3, parameters={"note": "é ü"})
        if binary:  # the input's bytes after the JSON header, as tritonclient sends them
            header = json.dumps(
                {
                    "inputs": [
                        {"name": "IN", "datatype": "INT32", "shape": [1],
                         "parameters": {"binary_data_size": 4}}
                    ],
                    "parameters": {"note": "é ü"},
                }
            ).encode()  # fmt: skip
            response = requests.post(
                f"{server.url}/v2/models/handed_{runtime}/infer",
                data=header + np.array([3], np.int32).tobytes(),
                headers={"Inference-Header-Content-Length": str(len(header))},
                timeout=60,
            )
        else:
            response = _infer(server, f"handed_{runtime}", body)
        assert response.status_code == 200, response.text
        assert response.json()["outputs"][0]["data"] == ['dtype(\'int32\') {"note":"é ü"}']


_IN_TRITONS_WORDS = "Model {} - Error when running inference: "
BLS_ANSWERS = [
    "ERR:"
    + _IN_TRITONS_WORDS.format("missing")
    + "Failed for execute the inference request. Model 'missing' is not ready.",
    "ERR:"
    + _IN_TRITONS_WORDS.format("raiser_process")
    + "unexpected inference input 'X' for model 'raiser_process'",
    # the target's own failure: its text, no prefix
    "ERR:Failed to process the request(s) for model 'raiser_process_0', message: RuntimeError: "
    "boom 1",
    "ERR:"
    + _IN_TRITONS_WORDS.format("midstream_process")
    + "Model midstream_process is using the decoupled. The current BLS request call doesn't "
    "support models using the decoupled transaction policy. Please use 'decoupled=True' "
    "argument to the 'exec' or 'async_exec' calls for decoupled models.'",
    "RAISED:Expect parameters values to have type bool/int/str, found type <class 'list'>",
    "OK:OUT",  # an output asked for twice is one
    # an empty name too ("Model  - ...", two spaces)
    "ERR:"
    + _IN_TRITONS_WORDS.format("")
    + "Failed for execute the inference request. Model '' is not ready.",
]


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("case", range(len(BLS_ANSWERS)))
def test_a_bls_call_is_answered_in_tritons_words(
    server: ServeProcess, runtime: str, case: int
) -> None:
    response = _infer(server, f"bls_cases_{runtime}", _int_body(case))
    assert response.status_code == 200, response.text
    seen = response.json()["outputs"][0]["data"][0]
    expected = BLS_ANSWERS[case]
    assert seen.startswith(expected) if case == 2 else seen == expected
