"""A config's inputs and outputs against an ONNX session's (or graph's), refused in Triton's
words (the expected texts of Triton's qa/L0_model_config autofill_noplatform/onnx cases)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.onnx_models import make_onnx_add
from tritonconfig import graph_mismatch, io_mismatch, parse_config

INPUTS = [("INPUT0", [-1, 16]), ("INPUT1", [-1, 16])]
OUTPUTS = [("OUTPUT0", [-1, 16]), ("OUTPUT1", [-1, 16])]


def _config(inputs: str, outputs: str, max_batch_size: int = 1) -> object:
    text = (
        f'name: "m"\nmax_batch_size: {max_batch_size}\ninput [ {inputs} ]\noutput [ {outputs} ]\n'
    )
    return parse_config(text, "c")


def _io(name: str, dims: str = "[ 16 ]") -> str:
    return f'{{ name: "{name}" data_type: TYPE_INT32 dims: {dims} }}'


GOOD_OUT = f"{_io('OUTPUT0')}, {_io('OUTPUT1')}"


def test_a_config_that_fits_the_session() -> None:
    config = _config(f"{_io('INPUT0')}, {_io('INPUT1')}", GOOD_OUT)
    assert io_mismatch(config, INPUTS, OUTPUTS) == ""


@pytest.mark.parametrize(
    ("inputs", "outputs", "message"),
    [
        (
            _io("INPUT1"),
            GOOD_OUT,
            "unable to load model 'm', configuration expects 1 inputs, model provides 2",
        ),
        (
            f"{_io('INPUT0')}, {_io('INPUT1')}, {_io('INPUT2')}",
            GOOD_OUT,
            "unable to load model 'm', configuration expects 3 inputs, model provides 2",
        ),
        (
            f"{_io('INPUT0')}, {_io('INPUT_UNKNOWN')}",
            GOOD_OUT,
            "unexpected inference input 'INPUT_UNKNOWN', allowed inputs are: INPUT0, INPUT1",
        ),
        (
            f"{_io('INPUT0')}, {_io('INPUT1')}",
            f"{_io('OUTPUT0')}, {_io('OUTPUT_UNKNOWN')}",
            "unexpected inference output 'OUTPUT_UNKNOWN', allowed outputs are: OUTPUT0, OUTPUT1",
        ),
        (
            f"{_io('INPUT0', '[ 16, 1 ]')}, {_io('INPUT1')}",
            GOOD_OUT,
            "model 'm', tensor 'INPUT0': the model expects 2 dimensions (shape [-1,16]) but the "
            "model configuration specifies 3 dimensions (an initial batch dimension because "
            "max_batch_size > 0 followed by the explicit tensor shape, making complete shape "
            "[-1,16,1])",
        ),
    ],
)
def test_what_triton_refuses(inputs: str, outputs: str, message: str) -> None:
    assert io_mismatch(_config(inputs, outputs), INPUTS, OUTPUTS) == message


def test_a_non_batching_config_names_its_shape() -> None:
    config = _config(f"{_io('INPUT0', '[ 4 ]')}, {_io('INPUT1')}", GOOD_OUT, max_batch_size=0)
    message = io_mismatch(
        config, [("INPUT0", [16]), ("INPUT1", [16])], [("OUTPUT0", [16]), ("OUTPUT1", [16])]
    )
    assert message.endswith("specifies 1 dimensions (shape [4])")


def test_batch_input_targets_are_the_servers_not_the_configs() -> None:
    text = (
        'name: "m"\nmax_batch_size: 1\n'
        f"input [ {_io('INPUT0')} ]\noutput [ {GOOD_OUT} ]\n"
        'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "COUNT" data_type: TYPE_FP32 '
        'source_input: "INPUT0" } ]\n'
    )
    inputs = [("INPUT0", [-1, 16]), ("COUNT", [-1, 1])]
    assert io_mismatch(parse_config(text, "c"), inputs, OUTPUTS) == ""


def test_a_sequence_models_control_and_state_inputs_count_as_triton_counts_them() -> None:
    """One model input per control kind (START's two controls name one tensor) and one per
    implicit state, beside the config's own inputs (qa/L0_implicit_state's ONNX models)."""
    text = (
        'name: "m"\nmax_batch_size: 1\ninput [ '
        + _io("INPUT0")
        + " ]\noutput [ "
        + _io("OUTPUT0")
        + ' ]\nsequence_batching { control_input [ { name: "START" '
        "control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ] "
        'state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 '
        "dims: [ 1 ] } ] }\n"
    )
    config = parse_config(text, "c")
    session = [("INPUT0", [-1, 16]), ("START", [-1, 1]), ("STATE_IN", [-1, 1])]
    outputs = [("OUTPUT0", [-1, 16]), ("STATE_OUT", [-1, 1])]
    assert io_mismatch(config, session, outputs) == ""
    assert io_mismatch(config, session[:2], outputs) == (
        "unable to load model 'm', configuration expects 3 inputs, model provides 2"
    )


def test_a_config_against_each_served_versions_graph(tmp_path: Path) -> None:
    """What a front door checks at start without a session: the graph read from the file."""
    model_dir = make_onnx_add(tmp_path, "m", size=4)
    make_onnx_add(tmp_path / "other", "m", size=8)  # a second version, its graph another size
    (model_dir / "2").mkdir()
    (tmp_path / "other" / "m" / "1" / "model.onnx").rename(model_dir / "2" / "model.onnx")
    text = (model_dir / "config.pbtxt").read_text()
    config = parse_config(text, "c")
    assert graph_mismatch(config, model_dir, ["1"], "c") == ""
    assert graph_mismatch(config, model_dir, ["1", "2"], "c").startswith(
        "model 'm', tensor 'INPUT0': the model expects 2 dimensions (shape [-1,8])"
    )
    (model_dir / "1" / "model.onnx").write_bytes(b"not onnx")
    assert "cannot read ONNX model model.onnx" in graph_mismatch(config, model_dir, ["1"], "c")


def test_a_scalar_takes_one_element_dims_without_batching_only() -> None:
    # Triton's onnxruntime backend (qa/L0_scalar_io): a 0-dimensional model tensor loads with
    # dims [1] or [1, 1], not [2], and not behind a batch dimension.
    scalar: list[tuple[str, list[int]]] = [("INPUT", [])]
    for dims, fits in (("[ 1 ]", True), ("[ 1, 1 ]", True), ("[ 2 ]", False)):
        config = _config(_io("INPUT", dims), _io("OUTPUT", dims), max_batch_size=0)
        assert (io_mismatch(config, scalar, [("OUTPUT", [])]) == "") is fits
    batched = _config(_io("INPUT", "[ 1 ]"), _io("OUTPUT", "[ 1 ]"))
    assert "the model expects 0 dimensions" in io_mismatch(batched, scalar, [("OUTPUT", [])])


# qa/L0_initializer_as_input: an ONNX initializer a request may override, named in the config
# as an optional input (Triton's onnxruntime backend does not count optional inputs).
_INITIALIZER = """
name: "add_with_initializer" platform: "onnxruntime_onnx" max_batch_size: 0
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 5, 5 ] },
        { name: "INITIALIZER" data_type: TYPE_FP32 dims: [ 5, 5 ] optional: true } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 5, 5 ] } ]
"""


def test_an_overridable_initializer_is_an_optional_input() -> None:
    config = parse_config(_INITIALIZER, "c")
    inputs, outputs = [("INPUT", [5, 5])], [("OUTPUT", [5, 5])]
    assert io_mismatch(config, inputs, outputs, [("INITIALIZER", [5, 5])]) == ""
    # Without it the model does not have the input the config names.
    assert io_mismatch(config, inputs, outputs) == (
        "unexpected inference input 'INITIALIZER', allowed inputs are: INPUT"
    )
    # An initializer's shape is judged as an input's.
    assert "tensor 'INITIALIZER'" in io_mismatch(config, inputs, outputs, [("INITIALIZER", [4])])


def test_a_batch_outputs_shape_is_not_the_models() -> None:
    # qa/L0_batch_input's ragged_io: OUTPUT0 is scattered back to each request in its input's
    # shape (BATCH_SCATTER_WITH_INPUT_SHAPE), so the model's [-1] need not be [-1, -1].
    config = parse_config(
        'name: "ragged_io" platform: "onnxruntime_onnx" max_batch_size: 4 '
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ] '
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ] '
        'batch_output [ { target_name: "OUTPUT0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
        'source_input: "INPUT0" } ]',
        "c",
    )
    assert io_mismatch(config, [("INPUT0", [-1])], [("OUTPUT0", [-1])]) == ""
