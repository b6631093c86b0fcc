"""`thaw snapshot build --target cuda...` on a machine without CUDA: a clear refusal, exit 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.onnx_models import make_onnx_add

pytestmark = pytest.mark.integration

TRT_ACCELERATOR = """
optimization { execution_accelerators {
  gpu_execution_accelerator : [ {
    name : "tensorrt"
    parameters { key: "precision_mode" value: "FP16" }
  } ]
}}
"""


def test_cli_build_for_cuda_without_cuda_fails_clearly(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    model_dir = make_onnx_add(tmp_path / "repo")
    config = model_dir / "config.pbtxt"
    config.write_text(config.read_text() + TRT_ACCELERATOR)
    for target, message in [
        ("cuda", "target `cuda`: no CUDA device"),
        ("cuda:sm_90", "needs a CUDA device, and this machine has none"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "thaw.cli", "snapshot", "build", str(model_dir),
             "--store", str(tmp_path / "store"), "--target", target],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        assert message in done.stderr and "Traceback" not in done.stderr
