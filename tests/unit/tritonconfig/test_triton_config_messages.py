"""The configs Triton's qa/L0_model_config refuses, refused in Triton's words (each message is
the `expected` text of that suite's case, ending "for <model>")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonconfig import (
    ModelConfigError,
    complete_config,
    fill_defaults,
    normalize_platform,
    parse_config,
    validate_config,
)
from tritonconfig.ensemble import cycle_error
from tritonconfig.onnx_autocomplete import autocomplete_from_onnx
from tritonconfig.validate import io_shape_problem

HEAD = 'name: "m"\nplatform: "onnxruntime_onnx"\n'


def _refusal(text: str) -> str:
    config = parse_config(text, "repo/m/config.pbtxt")
    normalize_platform(config, None, "repo/m/config.pbtxt")
    fill_defaults(config, gpu_available=False)
    with pytest.raises(ModelConfigError) as info:
        validate_config(config, "repo/m/config.pbtxt")
    return info.value.message


def _io(
    field: str = "input", dims: str = "[ 4 ]", reshape: str = "", data_type: str = "TYPE_FP32"
) -> str:
    """The model's one input and one output, `field` the one with these dims and reshape."""
    tensor = f'name: "{field}" data_type: {data_type} dims: {dims} {reshape}'
    good = "data_type: TYPE_FP32 dims: [ 4 ]"
    if field == "input":
        return f'input [ {{ {tensor} }} ]\noutput [ {{ name: "output" {good} }} ]\n'
    return f'input [ {{ name: "input" {good} }} ]\noutput [ {{ {tensor} }} ]\n'


def test_negative_max_batch_size() -> None:
    message = _refusal(HEAD + "max_batch_size: -1\n" + _io())
    assert message.endswith("'max_batch_size' must be non-negative value for m")


def test_missing_data_type() -> None:
    message = _refusal(HEAD + "max_batch_size: 4\n" + _io(data_type="TYPE_INVALID"))
    assert message.endswith("model input 'input' must specify 'data_type' for m")


@pytest.mark.parametrize("field", ["input", "output"])
def test_zero_dimension(field: str) -> None:
    message = _refusal(HEAD + "max_batch_size: 4\n" + _io(field, dims="[ 2, 0 ]"))
    assert message.endswith(
        f"model {field} '{field}' dimension must be integer >= 1, or -1 to indicate a "
        "variable-size dimension for m"
    )


@pytest.mark.parametrize(
    ("dims", "reshape", "batching", "problem"),
    [
        ([4], [], False, "cannot have empty reshape for non-batching model"),
        ([4], [2, 0], True, "reshape dimensions must be integer >= 1, or -1"),
        ([4], [3], True, "has different size for dims and reshape"),
        ([2, -1], [4], True, "has different size for dims and reshape"),
        ([2, -1, 3], [2, -1, 3, -1], True, "has different number of variable-size dimensions"),
        ([2, -1, 3], [2, -1, 4], True, "has different size for dims and reshape"),
    ],
)
def test_reshape_problems(
    dims: list[int], reshape: list[int], batching: bool, problem: str
) -> None:
    assert io_shape_problem(dims, reshape, batching=batching).startswith(problem)


@pytest.mark.parametrize(
    ("dims", "reshape", "batching"),
    [
        ([4], [2, 2], False),
        ([1], [], True),  # a batching model's scalar reshape
        ([2, -1, 6], [2, -1, 3, 2], True),
        ([-1], [-1], False),
        ([3, -1], None, True),
    ],
)
def test_reshapes_triton_accepts(
    dims: list[int], reshape: list[int] | None, batching: bool
) -> None:
    assert io_shape_problem(dims, reshape, batching=batching) == ""


def test_reshape_message_names_the_tensor_and_model() -> None:
    io = _io("output", dims="[ 4 ]", reshape="reshape: { shape: [ 5 ] }")
    message = _refusal(HEAD + "max_batch_size: 4\n" + io)
    assert message.endswith("model output 'output' has different size for dims and reshape for m")


def test_cpu_group_with_gpus() -> None:
    group = "instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]\n"
    message = _refusal(HEAD + "max_batch_size: 4\n" + _io() + group)
    assert message.endswith(
        "instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs"
    )


def test_negative_gpu_id() -> None:
    groups = "instance_group [ { count: 1 } ]\ninstance_group [ { kind: KIND_GPU gpus: [ -1 ] } ]\n"
    message = _refusal(HEAD + "max_batch_size: 4\n" + _io() + groups)
    assert "instance group m_1 of model m specifies invalid or unsupported gpu id -1." in message


BATCH_IO = (
    'name: "m"\nplatform: "pytorch_libtorch"\n'
    'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
    'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "B" data_type: TYPE_FP32 } ]',
            "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 0",
        ),
        (
            'batch_input [ { kind: BATCH_ITEM_SHAPE target_name: "B" data_type: TYPE_FP32 '
            'source_input: [ "INPUT", "INPUT" ] } ]',
            "batch input kind 'BATCH_ITEM_SHAPE' expects 1 source input, got 2",
        ),
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "B" data_type: TYPE_FP32 '
            'source_input: "NOPE" } ]',
            "unknown source input name 'NOPE'",
        ),
        (
            'batch_output [ { target_name: [ "OUTPUT", "OUTPUT" ] '
            'kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT" } ]',
            "target output name 'OUTPUT' can only be specified once",
        ),
        (
            'batch_output [ { target_name: "NOPE" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
            'source_input: "INPUT" } ]',
            "unknown target output name 'NOPE'",
        ),
        (
            'batch_output [ { target_name: "OUTPUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE } ]',
            "batch output kind 'BATCH_SCATTER_WITH_INPUT_SHAPE' expects 1 source input, got 0",
        ),
    ],
)
def test_batch_input_and_output_rules(entry: str, message: str) -> None:
    assert _refusal(BATCH_IO + entry + "\n").endswith(message)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            'name: "m"\nplatform: "tensorflo"\n',
            "unexpected platform type 'tensorflo' for m",
        ),
        (
            'name: "m"\n',
            "Invalid model name: Could not determine backend for model 'm' with no backend in "
            "model configuration. Expected model name of the form 'model.<backend_name>'.",
        ),
        (
            'name: "m"\nbackend: "onnxruntime"\nruntime: "__invalid_runtime__"\n',
            "unable to find backend library '__invalid_runtime__' for model 'm'",
        ),
        (
            'name: "m"\nbackend: "onnxruntime"\nruntime: "../dummy/libtriton_identity.so"\n',
            "backend library name '../dummy/libtriton_identity.so' escapes backend directory",
        ),
    ],
)
def test_platform_backend_and_runtime_refusals(config: str, message: str) -> None:
    parsed = parse_config(config, "repo/m/config.pbtxt")
    with pytest.raises(ModelConfigError) as info:
        normalize_platform(parsed, None, "repo/m/config.pbtxt")
    assert info.value.message.endswith(message)


@pytest.mark.parametrize("runtime", ["", "libtriton_onnxruntime.so", "model.py"])
def test_runtimes_thaw_has(runtime: str) -> None:
    parsed = parse_config(f'name: "m"\nbackend: "onnxruntime"\nruntime: "{runtime}"\n', "c")
    normalize_platform(parsed, None, "c")
    assert parsed.platform == "onnxruntime_onnx"


def test_a_config_is_judged_before_its_versions(tmp_path: Path) -> None:
    """Triton's order: a config it refuses is refused in its words even when the model has no
    version directory (most of qa/L0_model_config's noautofill_platform cases have none)."""
    config = parse_config(HEAD + "max_batch_size: -1\n" + _io(), "repo/m/config.pbtxt")
    with pytest.raises(ModelConfigError, match="'max_batch_size' must be non-negative value"):
        complete_config(
            config, tmp_path, "repo/m/config.pbtxt",
            gpu_available=False, require_model_files=True, auto_complete=False,
        )  # fmt: skip


def test_a_good_config_without_a_version_is_refused_for_that(tmp_path: Path) -> None:
    config = parse_config(HEAD + "max_batch_size: 4\n" + _io(), "repo/m/config.pbtxt")
    with pytest.raises(ModelConfigError, match="no version directory to serve"):
        complete_config(
            config, tmp_path, "repo/m/config.pbtxt",
            gpu_available=False, require_model_files=True, auto_complete=False,
        )  # fmt: skip


def test_a_model_without_outputs() -> None:
    text = (
        HEAD + 'max_batch_size: 4\ninput [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    message = _refusal(text)
    assert message.endswith(
        "model configuration must contain at least one output, none were specified"
    )


def test_autofill_refuses_batching_for_a_graph_without_a_batch_dimension(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("INPUT0", TensorProto.INT32, [16])
    y = helper.make_tensor_value_info("OUTPUT0", TensorProto.INT32, [16])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], "g", [x], [y]
    )
    onnx.save(helper.make_model(graph), str(tmp_path / "model.onnx"))
    config = parse_config(
        'name: "m"\nmax_batch_size: 1\n'
        'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]',
        "c",
    )
    with pytest.raises(ModelConfigError) as info:
        autocomplete_from_onnx(config, tmp_path / "model.onnx", "c")
    assert info.value.message.endswith(
        "autofill failed for model 'm': model does not support batching while non-zero "
        "max_batch_size is specified"
    )


def test_one_control_tensor_for_two_kinds_in_two_entries() -> None:
    sequence = (
        "sequence_batching { control_input [ "
        '{ name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },'
        '{ name: "START" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }'
        " ] }\n"
    )
    message = _refusal(HEAD + "max_batch_size: 4\n" + _io() + sequence)
    assert message.endswith(
        "sequence batching control tensor 'START' is specified for multiple control kinds for m"
    )


def test_a_negative_gpu_id_is_found_before_a_cpu_group_naming_gpus() -> None:
    groups = (
        "instance_group [ { gpus: [ 0 ] } ]\ninstance_group [ { kind: KIND_GPU gpus: [ -1 ] } ]\n"
    )
    message = _refusal(HEAD + "max_batch_size: 4\n" + _io() + groups)
    assert "instance group m_1 of model m specifies invalid or unsupported gpu id -1." in message


def test_cycle_message_is_tritons() -> None:
    assert (
        cycle_error(["a", "b", "a"]) == "circular dependency between ensembles: a -> ... -> b -> a"
    )
    assert cycle_error(["a", "a"]) == "circular dependency between ensembles: a -> ... -> a -> a"


ENSEMBLE = (
    'name: "e"\nplatform: "ensemble"\nmax_batch_size: 4\n'
    'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'ensemble_scheduling { step [ { model_name: "m" model_version: -1 '
    'input_map { key: "input" value: "IN" } output_map { key: "output" value: "OUT" } } ] }\n'
)


def test_an_ensemble_with_a_backend() -> None:
    parsed = parse_config(ENSEMBLE + 'backend: "onnxruntime"\n', "c")
    with pytest.raises(ModelConfigError) as info:
        normalize_platform(parsed, None, "c")
    assert info.value.message.endswith(
        "Ensemble model 'e' must have platform type 'ensemble' and empty backend type"
    )


def test_an_ensemble_with_an_optimization() -> None:
    text = ENSEMBLE + "optimization { input_pinned_memory { enable: true } }\n"
    message = _refusal(text)
    assert message.endswith("optimization should not be specified for ensemble 'e'")


def test_an_ensembles_transaction_policy_is_reported_set_and_empty() -> None:
    config = parse_config(ENSEMBLE, "c")
    normalize_platform(config, None, "c")
    fill_defaults(config, gpu_available=False)
    assert config.HasField("model_transaction_policy")
    assert not config.model_transaction_policy.decoupled
