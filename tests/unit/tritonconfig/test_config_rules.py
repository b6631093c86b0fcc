"""config.pbtxt parsing, platform normalisation, validation and Triton's JSON form."""

from __future__ import annotations

import json

import pytest

from tritonconfig import (
    ModelConfigError,
    back_with_steps,
    config_to_json,
    default_model_filename,
    fill_defaults,
    normalize_platform,
    parse_config,
    unload_plan,
    validate_config,
)

GOOD = """
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 3, -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT64 dims: [ 3 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""


def _checked(text: str, source: str = "repo/m/config.pbtxt"):
    config = parse_config(text, source)
    normalize_platform(config, None, source)
    fill_defaults(config, gpu_available=False)
    validate_config(config, source)
    return config


def test_good_config_parses_into_tritonclient_message() -> None:
    config = _checked(GOOD)
    assert config.max_batch_size == 8
    assert config.backend == "onnxruntime"
    assert [i.name for i in config.input] == ["IN"]
    assert config.instance_group[0].count == 2
    assert config.instance_group[0].name == "m_0"


def test_json_matches_triton_form_with_int64_as_numbers() -> None:
    data = config_to_json(_checked(GOOD))
    text = json.dumps(data)
    assert data["input"][0]["dims"] == [3, -1]
    assert data["output"][0]["dims"] == [3]
    assert '"dims": ["' not in text
    assert data["max_batch_size"] == 8
    assert data["input"][0]["data_type"] == "TYPE_FP32"
    assert data["version_policy"] == {"latest": {"num_versions": 1}}
    assert data["instance_group"][0]["kind"] == "KIND_CPU"
    # Triton prints defaults too.
    assert data["input"][0]["optional"] is False


def test_json_writes_a_map_of_queue_policies_in_field_order_with_uint64_numbers() -> None:
    # qa/L0_config_json's max_priority_level greps Triton's compact /config for the policy of
    # level 2^32 in the .proto's field order, timeout_action first (below).
    text = """
    name: "m" backend: "python" max_batch_size: 1
    input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
    output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
    dynamic_batching {
      priority_levels: 18446744073709551615 default_priority_level: 4294967295
      priority_queue_policy [ { key: 4294967296 value: { timeout_action: REJECT
        default_timeout_microseconds: 18446744073709551615 allow_timeout_override: true
        max_queue_size: 10 } } ]
    }
    """
    compact = json.dumps(config_to_json(parse_config(text, "repo/m/config.pbtxt")),
                         separators=(",", ":"))  # fmt: skip
    assert (
        '"4294967296":{"timeout_action":"REJECT","default_timeout_microseconds":'
        '18446744073709551615,"allow_timeout_override":true,"max_queue_size":10}'
    ) in compact
    assert '"priority_levels":18446744073709551615' in compact
    assert '"default_priority_level":4294967295' in compact


def test_json_writes_an_integral_float_as_an_integer_as_tritons() -> None:
    """protobuf's C++ JSON writer (Triton's `/config`, and a Python model's args) writes a
    float of integral value without a point: `fp32_false_true: [0, 1]`, checked on 2.51."""
    config = parse_config(
        'name: "s"\nsequence_batching { control_input [ { name: "START" control [ { kind: '
        "CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1.5 ] } ] } ] }",
        "config.pbtxt",
    )
    [control] = config_to_json(config)["sequence_batching"]["control_input"][0]["control"]
    assert json.dumps(control["fp32_false_true"]) == "[0, 1.5]"


def test_json_leaves_out_an_ensemble_field_triton_2_51_does_not_have() -> None:
    # Triton 2.51's /config of an ensemble has no `max_inflight_requests` (observed side by
    # side; tritonclient's newer .proto has it); a value set is written.
    text = """
    name: "ens"
    platform: "ensemble"
    input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "S" data_type: TYPE_FP32 dims: [ 4 ] } ]
    ensemble_scheduling { step [ { model_name: "m" model_version: -1
      input_map { key: "IN" value: "A" } output_map { key: "OUT" value: "S" } } ] }
    """
    config = parse_config(text, "repo/ens/config.pbtxt")
    scheduling = config_to_json(config)["ensemble_scheduling"]
    assert list(scheduling) == ["step"]
    config.ensemble_scheduling.max_inflight_requests = 4
    assert config_to_json(config)["ensemble_scheduling"]["max_inflight_requests"] == 4


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('name: "m"\nmax_batch_size: "eight"\n', ":2: "),
        ('name: "m"\nbogus_field: 3\n', 'no field named "bogus_field"'),
        ('name: "m"\ninput [ { name: "IN" data_type: TYPE_NOPE } ]', "TYPE_NOPE"),
        ('name: "m"\ninput [ { name: "IN" ', ":2"),
        ("\x00\x01\x02garbage", "config.pbtxt"),
        ('name: "m"\nmax_batch_size: 99999999999999999999\n', "config.pbtxt:2"),
    ],
)
def test_hostile_config_errors_name_file_and_line(text: str, fragment: str) -> None:
    with pytest.raises(ModelConfigError) as info:
        parse_config(text, "repo/m/config.pbtxt")
    assert "repo/m/config.pbtxt" in info.value.message
    assert fragment in info.value.message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            GOOD.replace("max_batch_size: 8", "max_batch_size: -1"),
            "'max_batch_size' must be non-negative value",
        ),
        (
            GOOD.replace("dims: [ 3 ]", "dims: [ 0 ]"),
            "model output 'OUT' dimension must be integer >= 1",
        ),
        (
            GOOD.replace("dims: [ 3, -1 ]", "dims: [ -7 ]"),
            "model input 'IN' dimension must be integer >= 1",
        ),
        (GOOD.replace("TYPE_INT64", "TYPE_INVALID"), "data_type"),
        (GOOD.replace('input [ { name: "IN"', 'input [ { name: ""'), "without a name"),
        (
            GOOD.replace("onnxruntime_onnx", "caffe2_netdef"),
            "unexpected platform type 'caffe2_netdef' for m",
        ),
    ],
)
def test_invalid_configs_are_refused_with_the_field(text: str, fragment: str) -> None:
    with pytest.raises(ModelConfigError) as info:
        _checked(text)
    assert fragment in info.value.message


def test_duplicate_input_names_are_refused() -> None:
    text = GOOD.replace(
        'input [ { name: "IN"',
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }, { name: "IN"',
    )
    with pytest.raises(ModelConfigError, match="duplicate input name 'IN'"):
        _checked(text)


def test_wrong_type_for_field_is_refused() -> None:
    with pytest.raises(ModelConfigError, match=r"config\.pbtxt:1"):
        parse_config("name: 42 max_batch_size: 1", "x/config.pbtxt")


@pytest.mark.parametrize(
    ("text", "platform", "backend", "filename"),
    [
        ('platform: "onnxruntime_onnx"', "onnxruntime_onnx", "onnxruntime", "model.onnx"),
        ('backend: "onnxruntime"', "onnxruntime_onnx", "onnxruntime", "model.onnx"),
        ('platform: "pytorch_libtorch"', "pytorch_libtorch", "pytorch", "model.pt"),
        ('backend: "pytorch"', "pytorch_libtorch", "pytorch", "model.pt"),
        ('platform: "tensorrt_plan"', "tensorrt_plan", "tensorrt", "model.plan"),
        ('backend: "python"', "", "python", "model.py"),
        ('backend: "python" default_model_filename: "m2.py"', "", "python", "m2.py"),
    ],
)
def test_platform_backend_normalisation_and_file_names(
    text: str, platform: str, backend: str, filename: str
) -> None:
    config = parse_config(text, "c")
    normalize_platform(config, None, "c")
    assert (config.platform, config.backend) == (platform, backend)
    assert default_model_filename(config) == filename


def test_platform_and_backend_that_disagree_are_refused() -> None:
    config = parse_config('platform: "onnxruntime_onnx" backend: "pytorch"', "c")
    with pytest.raises(ModelConfigError, match="does not match"):
        normalize_platform(config, None, "c")


def test_an_unload_takes_the_ensembles_down_and_removes_dependents_as_tritons_graph() -> None:
    # Triton 2.51's dependency graph (observed side by side, docs/triton-http-parity.md,
    # "A twelfth side by side"): the ensembles that run a removed model go down with it and
    # stay in the graph; with unload_dependents, a model a removed ensemble runs is removed too
    # once nothing in the graph runs it and it was not loaded by name.
    graph = {"ens": {"simple"}, "ens2": {"simple"}, "outer": {"ens", "other"}}
    plan = unload_plan("simple", graph, unload_dependents=False)
    assert (plan.removed, plan.down) == (set(), {"ens", "ens2", "outer"})
    assert unload_plan("ens", graph, unload_dependents=False).down == {"outer"}
    # simple stays for ens2; other stays for outer, down with a step but still in the graph
    plan = unload_plan("ens", graph, unload_dependents=True)
    assert (plan.removed, plan.down) == (set(), {"outer"})
    plan = unload_plan("ens2", {"ens2": {"simple"}}, unload_dependents=True)
    assert (plan.removed, plan.down) == ({"simple"}, set())
    assert not unload_plan("ens2", {"ens2": {"simple"}}, unload_dependents=False).removed
    # loaded by name: kept
    plan = unload_plan("ens2", {"ens2": {"simple"}}, unload_dependents=True, named={"simple"})
    assert not plan.removed
    # in turn: an ensemble of ensembles removes what only it ran, down to the leaves
    graph = {"top": {"mid"}, "mid": {"leaf"}}
    assert unload_plan("top", graph, unload_dependents=True).removed == {"mid", "leaf"}


def test_ensembles_down_with_a_step_come_back_once_every_step_is_loaded() -> None:
    down = {"ens_two": {"pre"}, "nested": {"ens_two", "other"}}
    assert back_with_steps({"pre"}, down) == ["ens_two"]  # nested waits for other
    assert back_with_steps({"pre", "other"}, down) == ["ens_two", "nested"]  # in turn
    assert back_with_steps({"other"}, down) == []
    assert back_with_steps(set(), {}) == []
