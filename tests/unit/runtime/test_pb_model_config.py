"""pb_utils.ModelConfig, what a Python model's `auto_complete_config` may set: python_backend's
rules, refused in its words (the expected texts of qa/L0_model_config's
autofill_noplatform/python cases, which grep for them)."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.python import pb_utils
from tritonconfig import config_to_json, parse_config

_CONFIG = """
name: "m"
backend: "python"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def _wrapper(text: str = _CONFIG) -> pb_utils.ModelConfig:
    """The wrapper as the backend builds it: the config as Triton's JSON (defaults printed)."""
    return pb_utils.ModelConfig(config_to_json(parse_config(text, "m")))


def _refused(call: Any, *args: Any) -> str:
    with pytest.raises(ValueError) as info:
        call(*args)
    return str(info.value)


@pytest.mark.parametrize(
    ("tensor", "said"),
    [
        ({"data_type": "TYPE_FP32", "dims": [4]}, "input in auto-complete-config function for "
         "model 'm' is missing 'name' property."),
        ({"name": "IN", "dims": [4]}, "input 'IN' in auto-complete-config function for model "
         "'m' is missing 'data_type' property."),
        ({"name": "IN", "data_type": "TYPE_FP32"}, "input 'IN' in auto-complete-config "
         "function for model 'm' is missing 'dims' property."),
        ({"name": "IN", "data_type": "TYPE_FP32", "dims": [4], "is_shape_tensor:": True},
         "input 'IN' in auto-complete-config function for model 'm' contains property other "
         "than 'name', 'data_type', 'dims' and 'optional'."),
    ],
)  # fmt: skip
def test_an_input_needs_its_three_properties_and_no_other(
    tensor: dict[str, Any], said: str
) -> None:
    assert _refused(_wrapper().add_input, tensor) == said


def test_an_output_may_not_say_optional() -> None:
    tensor = {"name": "OUT", "data_type": "TYPE_FP32", "dims": [4], "optional": True}
    assert _refused(_wrapper().add_output, tensor) == (
        "output 'OUT' in auto-complete-config function for model 'm' contains property other "
        "than 'name', 'data_type' and 'dims'."
    )
    assert _refused(_wrapper().add_output, {"name": "OUT", "dims": [4]}) == (
        "output 'OUT' in auto-complete-config function for model 'm' is missing 'data_type' "
        "property."
    )


def test_a_tensor_the_config_names_must_agree_with_it() -> None:
    wrapper = _wrapper()
    assert _refused(
        wrapper.add_input, {"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [4]}
    ) == (
        "unable to load model 'm', configuration expects datatype TYPE_FP32 for input "
        "'INPUT0', model provides TYPE_INT32"
    )
    assert _refused(
        wrapper.add_output, {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]}
    ) == (
        "model 'm', tensor 'OUTPUT0': the model expects dims [16] but the model configuration "
        "specifies dims [4]"
    )
    optional = {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4], "optional": True}
    assert _refused(wrapper.add_input, optional) == (
        "model 'm', tensor 'INPUT0': the model expects optional True but the model "
        "configuration specifies optional False"
    )


def test_what_the_config_leaves_open_is_filled_in_and_new_tensors_added() -> None:
    wrapper = _wrapper(
        'name: "m"\nbackend: "python"\ninput [ { name: "INPUT0" } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    wrapper.add_input({"name": "INPUT0", "data_type": "TYPE_INT8", "dims": [2, 2]})
    wrapper.add_input({"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]})
    wrapper.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]})  # agrees
    inputs = wrapper.as_dict()["input"]
    assert [(i["name"], i["data_type"], i["dims"]) for i in inputs] == [
        ("INPUT0", "TYPE_INT8", [2, 2]),
        ("INPUT1", "TYPE_FP32", [4]),
    ]
    assert len(wrapper.as_dict()["output"]) == 1


def test_max_batch_size_may_grow_but_not_shrink_below_the_configs() -> None:
    wrapper = _wrapper()
    assert _refused(wrapper.set_max_batch_size, 2) == (
        "configuration specified max_batch_size 4, but in auto-complete-config function for "
        "model 'm' specified max_batch_size 2"
    )
    wrapper.set_max_batch_size(8)
    assert wrapper.max_batch_size() == 8


def test_the_transaction_policy_takes_decoupled_only_and_not_against_the_config() -> None:
    assert _refused(_wrapper().set_model_transaction_policy, {"invalid": "argument"}) == (
        "model transaction property in auto-complete-config function for model 'm' contains "
        "property other than 'decoupled'."
    )
    fixed = _wrapper(_CONFIG + "model_transaction_policy { decoupled: false }\n")
    assert _refused(fixed.set_model_transaction_policy, {"decoupled": True}) == (
        "trying to change decoupled property in auto-complete-config for model 'm', which is "
        "already set to 'False'."
    )
    # A config that says nothing of it (python_backend's decoupled examples): the model's word.
    free = _wrapper()
    free.set_model_transaction_policy({"decoupled": True})
    assert free.as_dict()["model_transaction_policy"] == {"decoupled": True}


def test_the_dynamic_batcher_is_refused_beside_another_scheduler() -> None:
    sequence = _wrapper(_CONFIG + "sequence_batching { }\n")
    assert _refused(sequence.set_dynamic_batching) == (
        "Configuration specified scheduling_choice as 'sequence_batching', but "
        "auto-complete-config function for model 'm' tries to set scheduling_choice as "
        "'dynamic_batching'"
    )
    plain = _wrapper()
    plain.set_dynamic_batching()
    assert plain.as_dict()["dynamic_batching"] == {}


@pytest.mark.parametrize("bad", ["INPUT0", ["INPUT0"], None, 4])
def test_a_tensor_that_is_no_dict_is_refused_in_words(bad: Any) -> None:
    said = _refused(_wrapper().add_input, bad)
    assert said.startswith("input in auto-complete-config function for model 'm' must be a dict")
