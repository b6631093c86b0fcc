"""`thaw serve` answers what Triton's qa/L0_scalar_io and L0_output_validation pin, as Triton
does, with tritonclient as the client (tests/conformance/qa_more_suites.py runs Triton's own
files from a mirror).

L0_scalar_io: an ONNX model's scalar tensor (0-dimensional, or of unknown rank: onnxruntime
reports both as shape []) loads with config dims of one element, `[1]` or `[1, 1]`, and a
request of that shape gets it back in that shape; dims of more than one element are refused
at load. L0_output_validation: a TorchScript model whose output disagrees with its config (its
datatype, an `OUTPUT__<i>` index it does not return) fails each request with Triton's
libtorch backend's words, a 400.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import write_config
from tests.fixtures.serve_process import ServeProcess
from tests.fixtures.torch_models import make_torchscript_scale

pytestmark = pytest.mark.integration


def _scalar_identity(repo: Path, name: str, dims: str, *, rank_known: bool) -> None:
    import onnx
    from onnx import TensorProto, helper

    shape: list[int] | None = (
        [] if rank_known else None
    )  # None: no shape at all, as gen_qa_ort_scalar_models.py
    x = helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, shape)
    graph = helper.make_graph([helper.make_node("Identity", ["INPUT"], ["OUTPUT"])], name, [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (repo / name / "1").mkdir(parents=True)
    onnx.save(model, str(repo / name / "1" / "model.onnx"))
    write_config(
        repo / name,
        f"""
        platform: "onnxruntime_onnx"
        input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: {dims} }} ]
        output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: {dims} }} ]
        """,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("scalar_repo")
    _scalar_identity(repo, "unranked_1dim", "[ 1 ]", rank_known=False)
    _scalar_identity(repo, "unranked_2dim", "[ 1, 1 ]", rank_known=False)
    _scalar_identity(repo, "scalar_1dim", "[ 1 ]", rank_known=True)
    _scalar_identity(repo, "scalar_two_elements", "[ 2 ]", rank_known=True)
    proc = ServeProcess(repo)
    try:
        proc.wait_listening()
        yield proc
    finally:
        proc.stop()


@pytest.mark.parametrize(
    ("model", "shape"),
    [("unranked_1dim", (1,)), ("unranked_2dim", (1, 1)), ("scalar_1dim", (1,))],
)
def test_a_scalar_tensor_takes_and_answers_one_element_dims(
    server: ServeProcess, model: str, shape: tuple[int, ...]
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_address)
    _wait_ready(client, model)
    data = np.full(shape, 7.5, dtype=np.float32)
    tensor = grpcclient.InferInput("INPUT", list(shape), "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer(model, [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT"), data)


def test_a_scalar_tensor_with_two_element_dims_is_refused_at_load(server: ServeProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_address)
    _wait_ready(client, "scalar_1dim")
    assert not client.is_model_ready("scalar_two_elements")
    index = {m.name: m for m in client.get_model_repository_index().models}
    assert index["scalar_two_elements"].reason == (
        "model 'scalar_two_elements', tensor 'INPUT': the model expects 0 dimensions (shape []) "
        "but the model configuration specifies 1 dimensions (shape [2])"
    )


def _wait_ready(client: grpcclient.InferenceServerClient, model: str) -> None:
    deadline = time.monotonic() + 60
    while not client.is_model_ready(model):
        assert time.monotonic() < deadline, f"{model} never ready"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def torch_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    pytest.importorskip("torch")
    repo = tmp_path_factory.mktemp("torch_output_repo")
    make_torchscript_scale(repo, "scale_ok", size=1)
    for name, old, new in (
        (
            "scale_int32_output",
            "data_type: TYPE_FP32 dims: [ 1 ] } ]\n",
            "data_type: TYPE_INT32 dims: [ 1 ] } ]\n",
        ),
        ("scale_output_1", '"OUTPUT__0"', '"OUTPUT__1"'),
    ):
        config = make_torchscript_scale(repo, name, size=1) / "config.pbtxt"
        text = config.read_text()
        output = text.index("output [")
        config.write_text(text[:output] + text[output:].replace(old, new))
    proc = ServeProcess(repo)
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def _torch_infer(server: ServeProcess, model: str, output: str) -> httpclient.InferResult:
    client = httpclient.InferenceServerClient(server.hostport)
    tensor = httpclient.InferInput("INPUT__0", [1], "FP32")
    tensor.set_data_from_numpy(np.ones(1, np.float32))
    return client.infer(model, [tensor], outputs=[httpclient.InferRequestedOutput(output)])


@pytest.mark.parametrize(
    ("model", "output", "message"),
    [
        (
            "scale_int32_output",
            "OUTPUT__0",
            "configuration expects datatype TYPE_INT32 for output 'OUTPUT__0', model provides "
            "TYPE_FP32",
        ),
        (
            "scale_output_1",
            "OUTPUT__1",
            "The output OUTPUT__1 in the model configuration refers to an output index which "
            "doesn't exist. This model has 1 outputs",
        ),
    ],
)
def test_a_torch_output_that_disagrees_with_the_config_fails_the_request(
    torch_server: ServeProcess, model: str, output: str, message: str
) -> None:
    with pytest.raises(InferenceServerException) as info:
        _torch_infer(torch_server, model, output)
    assert info.value.message() == message
    assert info.value.status() == "400"


def test_a_torch_output_that_agrees_with_the_config_is_answered(torch_server: ServeProcess) -> None:
    assert _torch_infer(torch_server, "scale_ok", "OUTPUT__0").as_numpy("OUTPUT__0").shape == (1,)
