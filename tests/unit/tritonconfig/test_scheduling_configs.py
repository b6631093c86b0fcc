"""Ensemble, sequence and dynamic-batching configs: what Triton refuses, in its words, and the
defaults it fills."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonconfig import (
    ModelConfigError,
    complete_config,
    composing_models,
    parse_config,
    sequence_controls,
    sequence_idle_us,
    validate_config,
)

ENSEMBLE = """
name: "e" platform: "ensemble" max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
ensemble_scheduling { step [ STEPS ] }
"""


def _step(model: str, ins: dict[str, str], outs: dict[str, str]) -> str:
    maps = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in ins.items())
    maps += " " + " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outs.items())
    return f'{{ model_name: "{model}" {maps} }}'


def _ensemble(*steps: str) -> str:
    return ENSEMBLE.replace("STEPS", ", ".join(steps))


def _complete(text: str, tmp_path: Path) -> None:
    (tmp_path / "1").mkdir(exist_ok=True)
    config = parse_config(text, "config.pbtxt")
    complete_config(config, tmp_path, "config.pbtxt", gpu_available=False, require_model_files=True)


def test_a_valid_ensemble_completes_without_instances_or_model_files(tmp_path: Path) -> None:
    text = _ensemble(_step("a", {"x": "IN"}, {"y": "T"}), _step("b", {"x": "T"}, {"y": "OUT"}))
    config = parse_config(text, "config.pbtxt")
    (tmp_path / "1").mkdir()
    complete_config(config, tmp_path, "c", gpu_available=False, require_model_files=True)
    assert len(config.instance_group) == 0 and not config.HasField("optimization")
    assert composing_models(config) == ["a", "b"]


@pytest.mark.parametrize(
    ("steps", "fragment"),
    [
        ((), "must specify 'step' for ensemble 'e'"),
        ((_step("", {"x": "IN"}, {"y": "OUT"}),), "must specify 'model_name' in step 0"),
        ((_step("a", {}, {"y": "OUT"}),), "must specify 'input_map' in step 0"),
        (
            (_step("a", {"x": "IN"}, {"y": "OUT"}), _step("b", {"x": "IN"}, {"y": "OUT"})),
            "ensemble tensor 'OUT' can appear in an output map only once",
        ),
        (
            (
                _step("a", {"x": "IN", "z": "T2"}, {"y": "T1"}),
                _step("b", {"x": "T1"}, {"y": "T2"}),
                _step("c", {"x": "T1"}, {"y": "OUT"}),
            ),
            "its steps form a cycle: step 1 ('b') -> step 0 ('a') -> step 1",
        ),
        (
            (_step("a", {"x": "IN", "z": "NOPE"}, {"y": "OUT"}),),
            "output 'OUT' for ensemble 'e' is not written: at least one of its depending "
            "tensors, 'NOPE', is not connected",
        ),
        (
            (_step("a", {"x": "IN"}, {"y": "OUT", "z": "SPARE"}),),
            "ensemble tensor 'SPARE' is unused",
        ),
        ((_step("e", {"x": "IN"}, {"y": "OUT"}),), "ensemble 'e' runs itself"),
    ],
)
def test_ensembles_triton_refuses_are_refused(
    steps: tuple[str, ...], fragment: str, tmp_path: Path
) -> None:
    text = ENSEMBLE.replace("ensemble_scheduling { step [ STEPS ] }", "") if not steps else None
    text = text + "ensemble_scheduling { }" if text is not None else _ensemble(*steps)
    with pytest.raises(ModelConfigError) as raised:
        _complete(text, tmp_path)
    assert fragment in raised.value.message


def test_ensemble_scheduling_needs_the_ensemble_platform(tmp_path: Path) -> None:
    text = 'name: "m" backend: "python" ensemble_scheduling { step [ { model_name: "a" } ] }'
    with pytest.raises(ModelConfigError, match="whose platform is not ensemble"):
        validate_config(parse_config(text, "c"), "c")


SEQUENCE = """
name: "s" backend: "python" max_batch_size: 2
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
sequence_batching { BODY }
"""


def test_sequence_defaults_and_controls_are_read() -> None:
    body = (
        'oldest { } control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START '
        'int32_false_true: [ 0, 1 ] } ] }, { name: "C" control [ { kind: '
        "CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT32 } ] } ]"
    )
    from tritonconfig import fill_defaults

    config = parse_config(SEQUENCE.replace("BODY", body), "c")
    fill_defaults(config, gpu_available=False)
    assert sequence_idle_us(config) == 1_000_000  # Triton's default
    assert list(config.sequence_batching.oldest.preferred_batch_size) == [2]
    controls = sequence_controls(config)
    assert {c.name: (c.data_type, c.false_true) for c in controls.values()} == {
        "S": ("TYPE_INT32", (0, 1)),
        "C": ("TYPE_UINT32", None),
    }


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (
            'control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START } ] } ]',
            "must specify either 'int32_false_true'",
        ),
        (
            'control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START '
            "fp32_false_true: [ 1 ] } ] } ]",
            "must have exactly 2 entries",
        ),
        (
            'control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID '
            "data_type: TYPE_FP32 } ] } ]",
            "unexpected data type for control CONTROL_SEQUENCE_CORRID",
        ),
        ("oldest { preferred_batch_size: [ 3 ] }", "must be <= max batch size"),
        ("direct { minimum_slot_utilization: 2.0 }", "minimum slot utilization must be in range"),
    ],
)
def test_sequence_configs_triton_refuses_are_refused(body: str, fragment: str) -> None:
    with pytest.raises(ModelConfigError) as raised:
        validate_config(parse_config(SEQUENCE.replace("BODY", body), "c"), "c")
    assert fragment in raised.value.message


def test_a_sequence_model_cannot_use_the_response_cache() -> None:
    text = SEQUENCE.replace("BODY", "") + "response_cache { enable: true }"
    with pytest.raises(ModelConfigError, match="Response Cache does not currently support"):
        validate_config(parse_config(text, "c"), "c")


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("preferred_batch_size: [ 0 ]", "dynamic batching preferred size must be positive"),
        ("preferred_batch_size: [ 9 ]", "dynamic batching preferred size must be <= max batch"),
        ("priority_levels: 2", "default priority level must be in range [1, 2]"),
        (
            "priority_levels: 2 default_priority_level: 1 "
            "priority_queue_policy { key: 3 value: {} }",
            "priority queue policy must have priority level in range [1, 2]",
        ),
        (
            "preserve_ordering: true priority_levels: 2 default_priority_level: 1",
            "Only one priority level is allowed when 'preserve_ordering' is true",
        ),
    ],
)
def test_dynamic_batching_configs_triton_refuses_are_refused(body: str, fragment: str) -> None:
    text = (
        'name: "d" backend: "python" max_batch_size: 8 '
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ] '
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ] '
        f"dynamic_batching {{ {body} }}"
    )
    with pytest.raises(ModelConfigError) as raised:
        validate_config(parse_config(text, "c"), "c")
    assert fragment in raised.value.message
