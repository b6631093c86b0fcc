"""`thaw serve` answers what Triton's qa/L0_scalar_io pins, as Triton does, with tritonclient as
the client (tests/conformance/qa_more_suites.py runs Triton's own files from a mirror).

An ONNX model's scalar tensor (0-dimensional, or of unknown rank: onnxruntime reports both
as shape []) loads with config dims of one element, `[1]` or `[1, 1]`, and a request of that
shape gets it back in that shape; dims of more than one element are refused at load.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.fixtures.models import write_config
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration


def _scalar_identity(repo: Path, name: str, dims: str, *, rank_known: bool) -> None:
    import onnx
    from onnx import TensorProto, helper

    shape = [] if rank_known else None  # None: no shape at all, as gen_qa_ort_scalar_models.py
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
