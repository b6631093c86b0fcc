"""What a model's backend refuses from its config alone is judged by `thaw up` at its read of
the repository, as a replica's load judges it (tritonconfig.backend_refusal): a TorchScript
model's datatype PyTorch cannot hold (qa/L0_libtorch_io_types), an onnxruntime `execution_mode`
but 0 or 1. The model is unavailable with Triton's words, the others served, or given
`--exit-on-error=true` the start is refused, though no model is loaded at start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from tests.fixtures.models import make_add_sub
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.torch_models import make_torchscript_add
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration

_QUIET = ("--warm-pool", "0", "--preload-frameworks", "", "--no-image-build")
_REFUSED = "unsupported datatype TYPE_UINT64 for output 'OUTPUT__1' for model 'torch_uint64'"


def _unavailable_beside_good(repo: Path, model: str, reason: str) -> None:
    """`thaw up` (its default `--exit-on-error`) starts on `repo`: `model` is listed
    unavailable with `reason`, and the model `good` beside it is served."""
    server = UpProcess(repo, *_QUIET)
    try:
        with httpclient.InferenceServerClient(server.hostport) as client:
            rows = {row["name"]: row for row in client.get_model_repository_index()}
            assert rows[model]["state"] == "UNAVAILABLE"
            assert rows[model]["reason"] == reason
            assert client.is_model_ready("good")
    finally:
        server.stop()


def test_an_unsupported_datatype_is_judged_at_start(tmp_path: Path) -> None:
    config = make_torchscript_add(tmp_path, "torch_uint64") / "config.pbtxt"
    text = config.read_text()
    bad = text.replace(
        '{ name: "OUTPUT__1" data_type: TYPE_FP32', '{ name: "OUTPUT__1" data_type: TYPE_UINT64'
    )
    assert bad != text
    config.write_text(bad)
    make_add_sub(tmp_path, "good")
    argv = [sys.executable, "-m", "thaw.cli", "up", str(tmp_path), "--port", "0", *_QUIET]
    refused = subprocess.run(
        [*argv, "--exit-on-error=true"], capture_output=True, text=True, timeout=120, check=False
    )
    assert refused.returncode == 1, refused.stderr
    assert f"thaw up: error: failed to load 'torch_uint64': {_REFUSED}" in refused.stderr
    _unavailable_beside_good(tmp_path, "torch_uint64", _REFUSED)


def test_an_onnxruntime_parameter_its_backend_refuses(tmp_path: Path) -> None:
    config = make_onnx_add(tmp_path, "onnx_parallel") / "config.pbtxt"
    config.write_text(
        config.read_text() + 'parameters [{ key: "execution_mode" value: { string_value: "3" } }]\n'
    )
    make_add_sub(tmp_path, "good")
    says = (
        "Invalid configuration value provided. Expected values for  execution_mode are 0 or 1 "
        "but got 3 ."
    )
    _unavailable_beside_good(tmp_path, "onnx_parallel", says)
