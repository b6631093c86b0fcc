"""thawserver.rate_limit_resources: what instances need of the rate limiter's resources, and
Triton's two refusals of a load, judged for a whole start as `thaw up` judges it
(qa/L0_rate_limiter's refused starts)."""

from __future__ import annotations

from google.protobuf import text_format

from thawserver.rate_limit_flags import ExplicitResource, RateLimitMode
from thawserver.rate_limit_resources import (
    GLOBAL,
    contended,
    count_refusal,
    group_devices,
    requirements,
    scope_refusal,
    start_refusals,
)
from tritonconfig.schema import mc

_R1_MIN_4 = (
    'Resource count for "resource1" is limited to {} which will prevent scheduling of one or '
    "more model instances, the minimum required count is 4"
)
_CONFLICT = (
    'Resource "resource2" is present as both global and device-specific resource in the model '
    "configuration."
)


def _config(groups: str) -> mc.ModelConfig:
    return text_format.Parse(f"instance_group [ {groups} ]", mc.ModelConfig())


# L0_rate_limiter's custom_zero_1_float32 and its _v2 (KIND_GPU groups: on a machine without a
# GPU their `gpus` list is empty, counted as device 0 as for a CPU group).
_ZERO = _config(
    '{ kind: KIND_GPU count: 1 rate_limiter { resources [{ name: "resource1" count: 4 }] } }'
)
_V2 = _config(
    '{ kind: KIND_GPU count: 1 rate_limiter { resources [{ name: "resource1" count: 2 },'
    ' { name: "resource2" global: true count: 2 }] priority: 2 } }'
)
_V3 = _config(
    '{ kind: KIND_GPU count: 1 rate_limiter { resources [{ name: "resource1" count: 2 },'
    ' { name: "resource2" global: false count: 2 }] priority: 2 } }'
)


def test_needs_per_device_and_global() -> None:
    config = _config(
        '{ name: "a" kind: KIND_GPU gpus: [0, 1]'
        ' rate_limiter { resources [{ name: "R" count: 3 }] } },'
        '{ name: "b" kind: KIND_CPU'
        ' rate_limiter { resources [{ name: "G" global: true count: 5 }] } }'
    )
    assert group_devices(config) == {"a": [0, 1], "b": [0]}
    assert requirements(config, group_devices(config)) == {
        (0, "R"): 3,
        (1, "R"): 3,
        (GLOBAL, "G"): 5,
    }
    assert requirements(_ZERO, group_devices(_ZERO)) == {(0, "resource1"): 4}


def test_an_explicit_count_below_a_need_is_refused_in_tritons_words() -> None:
    needs = requirements(_ZERO, group_devices(_ZERO))
    assert count_refusal(needs, ()) is None  # no flag: the largest need is the limit
    assert count_refusal(needs, (ExplicitResource("resource1", 4),)) is None
    assert count_refusal(needs, (ExplicitResource("resource1", 1),)) == _R1_MIN_4.format(1)
    # A count for device 10 only leaves device 0 none; a resource the flags do not name has 0.
    assert count_refusal(needs, (ExplicitResource("resource1", 10, 10),)) == _R1_MIN_4.format(0)
    assert count_refusal(needs, (ExplicitResource("other", 9),)) == _R1_MIN_4.format(0)


def test_one_resource_global_in_one_model_and_per_device_in_another_is_refused() -> None:
    v2 = requirements(_V2, group_devices(_V2))
    v3 = requirements(_V3, group_devices(_V3))
    assert scope_refusal(v3, [v2]) == _CONFLICT
    assert scope_refusal(v3, []) is None
    assert scope_refusal(v2, [v2]) is None


def test_a_start_refuses_the_models_tritons_loads_would_refuse_in_name_order() -> None:
    configs = {"custom_zero_1_float32": _ZERO, "custom_zero_1_float32_v2": _V2}
    explicit = (ExplicitResource("resource1", 1),)
    refused = start_refusals(configs, RateLimitMode.EXECUTION_COUNT, explicit)
    # test.sh's first refused start: resource1 limited to 1, and resource2 (not named) to 0.
    assert refused["custom_zero_1_float32"] == _R1_MIN_4.format(1)
    assert refused["custom_zero_1_float32_v2"].startswith("Resource count for ")
    explicit = (ExplicitResource("resource1", 3), ExplicitResource("resource2", 2))
    assert start_refusals(configs, RateLimitMode.EXECUTION_COUNT, explicit) == {
        "custom_zero_1_float32": _R1_MIN_4.format(3)
    }
    both = {**configs, "custom_zero_1_float32_v3": _V3}
    # Without explicit counts only the scopes can clash: the model after the global one.
    assert start_refusals(both, RateLimitMode.EXECUTION_COUNT, ()) == {
        "custom_zero_1_float32_v3": _CONFLICT
    }
    assert start_refusals(both, RateLimitMode.OFF, explicit) == {}


def test_a_refused_model_claims_nothing() -> None:
    """The global resource2 of a model refused for its resource1 does not make the next
    model's per-device resource2 a clash."""
    greedy = _config(
        '{ rate_limiter { resources [{ name: "resource1" count: 9 },'
        ' { name: "resource2" global: true count: 1 }] } }'
    )
    configs = {"a_greedy": greedy, "b_v3": _V3}
    explicit = (ExplicitResource("resource1", 2), ExplicitResource("resource2", 2))
    refused = start_refusals(configs, RateLimitMode.EXECUTION_COUNT, explicit)
    assert list(refused) == ["a_greedy"]


def test_hostile_resource_counts_and_names_are_judged_not_raised() -> None:
    """The largest count a config can hold, an empty name, a name with quotes and a newline:
    each is judged in Triton's words, none raises out of `thaw up`'s start."""
    odd = _config(
        '{ rate_limiter { resources [{ name: "" count: 4294967295 },'
        ' { name: "a\\"b\\nc" global: true count: 1 }] } }'
    )
    refused = start_refusals(
        {"odd": odd}, RateLimitMode.EXECUTION_COUNT, (ExplicitResource("x", 5),)
    )
    assert refused["odd"].startswith('Resource count for "a"b\nc" is limited to 0 ')
    assert start_refusals({"odd": odd}, RateLimitMode.EXECUTION_COUNT, ()) == {}
    huge = start_refusals(
        {"odd": odd}, RateLimitMode.EXECUTION_COUNT,
        (ExplicitResource("", 1), ExplicitResource('a"b\nc', 1)),
    )  # fmt: skip
    assert huge["odd"].endswith("the minimum required count is 4294967295")


def test_models_naming_a_resource_in_common_are_contended_with_every_name_they_name() -> None:
    lone = _config('{ count: 1 rate_limiter { resources [{ name: "own" count: 1 }] } }')
    plain = _config("{ count: 2 kind: KIND_CPU }")
    both = _config(
        '{ name: "a" count: 1 rate_limiter { resources [{ name: "resource1" count: 1 }] } },'
        '{ name: "b" count: 1 rate_limiter { resources [{ name: "mine" count: 1 }] } }'
    )
    configs = {"zero": _ZERO, "v2": _V2, "lone": lone, "plain": plain, "both": both}
    assert contended(configs) == {
        "both": frozenset({"resource1", "mine"}),
        "v2": frozenset({"resource1", "resource2"}),
        "zero": frozenset({"resource1"}),
    }
    # One model alone contends with nobody, whatever it names: its replicas count it alone.
    assert contended({"v2": _V2, "lone": lone}) == {}
    assert contended({}) == {}


def test_hostile_resource_names_and_many_models_are_grouped_not_raised() -> None:
    odd = '{ name: "" count: 1 }, { name: "q\\"uote\\nline \\u00e9" count: 4294967295 }'
    configs = {
        "empty_and_odd": _config(f"{{ count: 1 rate_limiter {{ resources [ {odd} ] }} }}"),
        "empty_too": _config('{ count: 1 rate_limiter { resources [{ name: "" count: 1 }] } }'),
        # Many groups and a resource named in each of 2,000 models: one pass, no blow-up.
        **{
            f"m{i}": _config(
                f'{{ count: 1 rate_limiter {{ resources [{{ name: "R{i % 7}" count: 1 }}] }} }}'
            )
            for i in range(2000)
        },
    }
    found = contended(configs)
    assert found["empty_and_odd"] == frozenset({"", 'q"uote\nline é'})
    assert found["empty_too"] == frozenset({""})
    assert len(found) == 2002 and found["m9"] == frozenset({"R2"})
