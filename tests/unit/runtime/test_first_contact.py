"""The first GPU run at load: one zero request the config's shapes allow, run before ready."""

from __future__ import annotations

from pathlib import Path

from runtime.backends.base import LoadContext
from runtime.backends.onnxruntime_backend import OnnxRuntimeBackend
from runtime.models.warmup import first_contact_sample, run_warmup
from tests.fixtures.onnx_models import make_onnx_add
from tritonconfig import complete_config, parse_config


def test_the_sample_is_one_batch_row_of_zeros_with_variable_dims_as_1() -> None:
    config = parse_config(
        'name: "m" backend: "onnxruntime" max_batch_size: 8\n'
        'input [ { name: "x" data_type: TYPE_FP16 dims: [ -1, 3 ] },'
        ' { name: "ids" data_type: TYPE_INT64 dims: [ 4 ] } ]',
        "c",
    )
    sample = first_contact_sample(config)
    assert sample is not None and sample.count == 1
    (request,) = sample.requests
    assert [(t.name, t.datatype, t.shape) for t in request.inputs] == [
        ("x", "FP16", (1, 1, 3)),
        ("ids", "INT64", (1, 4)),
    ]
    assert not request.inputs[0].data.any()


def test_strings_have_no_sample_form() -> None:
    config = parse_config(
        'name: "m" input [ { name: "s" data_type: TYPE_STRING dims: [ 1 ] } ]', "c"
    )
    assert first_contact_sample(config) is None


def test_the_sample_runs_on_a_real_instance(tmp_path: Path) -> None:
    model = make_onnx_add(tmp_path)
    config = parse_config((model / "config.pbtxt").read_text(), "c")
    complete_config(config, model, "c", gpu_available=False, require_model_files=True)
    backend = OnnxRuntimeBackend()
    backend.load(LoadContext("onnx_add", "1", model / "1", model, config, "KIND_CPU", 0))
    sample = first_contact_sample(config)
    assert sample is not None
    assert run_warmup("onnx_add", [backend], [sample]) >= 0.0  # raises if it did not run
