"""A PyTorch sequence model receives its control inputs (Triton's libtorch backend passes them as
forward arguments, placed by the `<name>__<i>` rule as any input), in a real `thaw serve`, over
HTTP with tritonclient; and so does its `model_warmup` sample naming them (qa/L0_warmup's
`libtorch_sequence_int32`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fixtures.models import write_config
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

_CONFIG = """
name: "torch_sequence"
platform: "pytorch_libtorch"
max_batch_size: 8
sequence_batching {
  control_input [
    { name: "START__1" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY__2" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
}
input [ { name: "INPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_warmup [ { name: "sequence sample" batch_size: 2 count: 2
  inputs { key: "INPUT__0" value: { data_type: TYPE_INT32 dims: 1 zero_data: true } }
  inputs { key: "START__1" value: { data_type: TYPE_INT32 dims: 1 zero_data: true } }
  inputs { key: "READY__2" value: { data_type: TYPE_INT32 dims: 1 zero_data: true } } } ]
"""


def _model(repo: Path) -> None:
    import torch

    class Controls(torch.nn.Module):
        def forward(
            self, x: torch.Tensor, start: torch.Tensor, ready: torch.Tensor
        ) -> torch.Tensor:
            return x + 100 * start + 10 * ready

    model_dir = repo / "torch_sequence"
    (model_dir / "1").mkdir(parents=True)
    torch.jit.script(Controls()).save(str(model_dir / "1" / "model.pt"))
    write_config(model_dir, _CONFIG)


def test_a_torch_sequence_model_gets_its_controls(tmp_path: Path) -> None:
    _model(tmp_path)
    server = ServeProcess(tmp_path)
    try:
        server.wait_ready(timeout_s=60)  # the warm-up sample, with its controls, ran at load
        client = httpclient.InferenceServerClient(server.hostport)
        tensor = httpclient.InferInput("INPUT__0", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[1]], np.int32))
        first = client.infer("torch_sequence", [tensor], sequence_id=7, sequence_start=True)
        then = client.infer("torch_sequence", [tensor], sequence_id=7, sequence_end=True)
        assert first.as_numpy("OUTPUT__0").tolist() == [[111]]  # START and READY true
        assert then.as_numpy("OUTPUT__0").tolist() == [[11]]  # READY only
    finally:
        server.stop()
