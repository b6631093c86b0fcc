"""Implicit state (`sequence_batching.state`, Triton's qa/L0_implicit_state): a stateful model
reads its sequence's state as an input and writes the next one as an output; the server keeps
it per sequence, from the START request (zeros) to the END request. In a real `thaw serve`,
over HTTP with tritonclient, on an ONNX and a TorchScript running-sum model, two sequences
interleaved (two instances: a non-batching one has one slot each). Such models were refused
at load before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import write_config
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

_CONFIG = """
name: "{name}"
platform: "{platform}"
max_batch_size: {max_batch}
instance_group [ {{ kind: KIND_CPU count: 2 }} ]
sequence_batching {{
  max_sequence_idle_microseconds: 5000000
  control_input [
    {{ name: "{start}" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }}
  ]
  state [ {{ input_name: "{state_in}" output_name: "{state_out}" data_type: TYPE_INT32
             dims: [ 1 ] }} ]
}}
input [ {{ name: "{input}" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "{output}" data_type: TYPE_INT32 dims: [ 1 ] }} ]
"""


def _onnx_sum(repo: Path, name: str, *, max_batch: int) -> None:
    """OUTPUT_STATE = INPUT_STATE + INPUT; OUTPUT = the same (START is fed, unused)."""
    import onnx
    from onnx import TensorProto, helper

    dims: list[int | str] = ["B", 1] if max_batch else [1]
    io = {n: helper.make_tensor_value_info(n, TensorProto.INT32, dims) for n in
          ("INPUT", "INPUT_STATE", "START", "OUTPUT", "OUTPUT_STATE")}  # fmt: skip
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT", "INPUT_STATE"], ["OUTPUT_STATE"]),
            helper.make_node("Identity", ["OUTPUT_STATE"], ["OUTPUT"]),
            helper.make_node("Identity", ["START"], ["_START"]),
        ],
        name,
        [io["INPUT"], io["INPUT_STATE"], io["START"]],
        [io["OUTPUT"], io["OUTPUT_STATE"]],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (repo / name / "1").mkdir(parents=True)
    onnx.save(model, str(repo / name / "1" / "model.onnx"))
    names = {"start": "START", "state_in": "INPUT_STATE", "state_out": "OUTPUT_STATE",
             "input": "INPUT", "output": "OUTPUT"}  # fmt: skip
    config = _CONFIG.format(name=name, platform="onnxruntime_onnx", max_batch=max_batch, **names)
    write_config(repo / name, config)


def _torch_sum(repo: Path, name: str) -> None:
    """The same in TorchScript, Triton's libtorch names (`INPUT_STATE__1`, `OUTPUT_STATE__1`)."""
    import torch

    class Sum(torch.nn.Module):
        def forward(
            self, x: torch.Tensor, state: torch.Tensor, start: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            total = x + state
            return total, total

    (repo / name / "1").mkdir(parents=True)
    torch.jit.script(Sum()).save(str(repo / name / "1" / "model.pt"))
    names = {"start": "START__2", "state_in": "INPUT_STATE__1", "state_out": "OUTPUT_STATE__1",
             "input": "INPUT__0", "output": "OUTPUT__0"}  # fmt: skip
    config = _CONFIG.format(name=name, platform="pytorch_libtorch", max_batch=0, **names)
    write_config(repo / name, config)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> ServeProcess:
    repo = tmp_path_factory.mktemp("implicit_state")
    _onnx_sum(repo, "onnx_sum", max_batch=4)
    _onnx_sum(repo, "onnx_nobatch_sum", max_batch=0)
    _torch_sum(repo, "torch_sum")
    serving = ServeProcess(repo)
    serving.wait_ready(timeout_s=120)
    yield serving
    serving.stop()


def _send(
    client: httpclient.InferenceServerClient,
    model: str,
    value: int,
    sequence: int,
    *,
    batched: bool,
    torch: bool = False,
    outputs: tuple[str, ...] = (),
    **flags: bool,
) -> httpclient.InferResult:
    shape = [1, 1] if batched else [1]
    tensor = httpclient.InferInput("INPUT__0" if torch else "INPUT", shape, "INT32")
    tensor.set_data_from_numpy(np.full(shape, value, np.int32))
    asked = [httpclient.InferRequestedOutput(o) for o in outputs] or None
    return client.infer(model, [tensor], outputs=asked, sequence_id=sequence, **flags)


@pytest.mark.parametrize(
    ("model", "batched", "torch"),
    [("onnx_sum", True, False), ("onnx_nobatch_sum", False, False), ("torch_sum", False, True)],
)
def test_each_sequence_keeps_its_own_state(
    server: ServeProcess, model: str, batched: bool, torch: bool
) -> None:
    client = httpclient.InferenceServerClient(server.hostport)
    output = "OUTPUT__0" if torch else "OUTPUT"

    def send(value: int, sequence: int, **flags: bool) -> int:
        result = _send(client, model, value, sequence, batched=batched, torch=torch, **flags)
        assert result.as_numpy("OUTPUT_STATE__1" if torch else "OUTPUT_STATE") is None
        return int(result.as_numpy(output).reshape(-1)[0])

    assert send(1, 11, sequence_start=True) == 1
    assert send(10, 12, sequence_start=True) == 10
    assert send(2, 11) == 3
    assert send(20, 12) == 30
    assert send(3, 11, sequence_end=True) == 6
    # A new sequence under the ended one's id starts from zeros again.
    assert send(5, 11, sequence_start=True) == 5
    assert send(30, 12, sequence_end=True) == 60
    assert send(1, 11, sequence_end=True) == 6


def test_an_undeclared_state_output_cannot_be_requested(server: ServeProcess) -> None:
    client = httpclient.InferenceServerClient(server.hostport)
    with pytest.raises(InferenceServerException, match="unexpected inference output"):
        _send(client, "onnx_sum", 1, 21, batched=True, outputs=("OUTPUT_STATE",),
              sequence_start=True, sequence_end=True)  # fmt: skip


def test_a_requested_output_leaves_the_state_out(server: ServeProcess) -> None:
    client = httpclient.InferenceServerClient(server.hostport)
    first = _send(client, "onnx_sum", 4, 31, batched=True, outputs=("OUTPUT",),
                  sequence_start=True)  # fmt: skip
    then = _send(client, "onnx_sum", 4, 31, batched=True, outputs=("OUTPUT",),
                 sequence_end=True)  # fmt: skip
    assert first.as_numpy("OUTPUT").tolist() == [[4]]
    assert then.as_numpy("OUTPUT").tolist() == [[8]]
    assert then.get_output("OUTPUT_STATE") is None
