"""runtime.scheduling.rate_limit: tritonserver's `--rate-limit` and `--rate-limit-resource`
values, and the resource map (qa/L0_model_update's resource tests)."""

from __future__ import annotations

import logging

import pytest
from google.protobuf import text_format

from runtime.scheduling.rate_limit import (
    GLOBAL,
    ExplicitResource,
    RateLimitError,
    RateLimitMode,
    ResourceLimits,
    parse_mode,
    parse_resource,
    requirements,
)
from thawserver.log_records import TritonRecord
from tritonconfig.schema import mc


def test_flag_values_are_triton_s_and_a_bad_one_is_refused_in_its_words() -> None:
    assert parse_mode("execution_count") is RateLimitMode.EXECUTION_COUNT
    assert parse_mode("off") is RateLimitMode.OFF
    with pytest.raises(ValueError, match=r"^Invalid rate limit mode: sometimes$"):
        parse_mode("sometimes")
    assert parse_resource("R1:10") == ExplicitResource("R1", 10, None)
    assert parse_resource("R1:10:1") == ExplicitResource("R1", 10, 1)
    for bad in ("R1", "R1:ten", ":4", "R1:1:2:3", "R1:-1"):
        with pytest.raises(ValueError, match=r"format is '<resource_name>:<count>:<device>'"):
            parse_resource(bad)


def _needs(groups: str) -> dict[tuple[int, str], int]:
    config = text_format.Parse(f"instance_group [ {groups} ]", mc.ModelConfig())
    return requirements(config, {g.name: [0] for g in config.instance_group})


def test_requirements_per_device_and_global() -> None:
    needs = _needs(
        '{ name: "a" kind: KIND_CPU rate_limiter { resources [ { name: "R1" count: 2 } ] } },'
        '{ name: "b" kind: KIND_CPU rate_limiter { resources [ { name: "R1" count: 5 },'
        ' { name: "G" global: true count: 3 } ] } }'
    )
    assert needs == {(0, "R1"): 5, (GLOBAL, "G"): 3}


def test_the_map_follows_the_largest_need_unless_an_explicit_count_is_given(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limits = ResourceLimits(RateLimitMode.EXECUTION_COUNT)
    with caplog.at_level(logging.DEBUG, logger="runtime.scheduling.rate_limit"):
        assert limits.update("m", {(0, "R1"): 4}) == {(0, "R1"): 4}
        assert limits.update("m", {(0, "R1"): 3}) == {(0, "R1"): 3}  # decreased with the need
    # Triton's record, its tab escaped as its log writes it (instance_update_test reads this),
    # once: the message holds the tab itself.
    records = [TritonRecord().format(record) for record in caplog.records]
    assert any("\\t\\tResource: R1\\t Count: 3\\n" in record for record in records), records
    assert "\t\tResource: R1\t Count: 3\n" in caplog.text
    assert limits.drop("m") == {}
    explicit = ResourceLimits(RateLimitMode.EXECUTION_COUNT, (ExplicitResource("R1", 10),))
    assert explicit.update("m", {(0, "R1"): 3}) == {(0, "R1"): 10}


def test_a_need_above_the_explicit_count_is_refused_in_triton_s_words() -> None:
    limits = ResourceLimits(RateLimitMode.EXECUTION_COUNT, (ExplicitResource("R1", 10),))
    limits.check("m", {(0, "R1"): 10})
    with pytest.raises(RateLimitError, match=r'^Resource count for "R1" is limited to 10 .*32$'):
        limits.check("m", {(0, "R1"): 32})
    # Of a device's own explicit count and the one for every device, the larger holds.
    per_device = ResourceLimits(
        RateLimitMode.EXECUTION_COUNT, (ExplicitResource("R1", 10), ExplicitResource("R1", 40, 0))
    )
    per_device.check("m", {(0, "R1"): 32})
    ResourceLimits(RateLimitMode.OFF, (ExplicitResource("R1", 1),)).check("m", {(0, "R1"): 32})


def test_once_explicit_counts_are_given_a_resource_not_named_for_the_device_has_none() -> None:
    # L0_rate_limiter: `--rate-limit-resource=resource1:10:10` gives device 10 only.
    limits = ResourceLimits(
        RateLimitMode.EXECUTION_COUNT,
        (ExplicitResource("resource1", 10, 10), ExplicitResource("resource2", 2)),
    )
    with pytest.raises(RateLimitError, match=r'"resource1" is limited to 0 .* count is 4$'):
        limits.check("m", {(0, "resource1"): 4})
    limits.check("m", {(GLOBAL, "resource1"): 4})  # a global resource: any device's count
    with pytest.raises(RateLimitError, match='"other" is limited to 0'):
        limits.check("m", {(0, "other"): 1})


def test_a_resource_global_in_one_model_and_per_device_in_another_is_refused() -> None:
    limits = ResourceLimits(RateLimitMode.EXECUTION_COUNT)
    limits.check("v2", {(0, "resource1"): 2, (GLOBAL, "resource2"): 2})
    limits.update("v2", {(0, "resource1"): 2, (GLOBAL, "resource2"): 2})
    message = (
        '^Resource "resource2" is present as both global and device-specific resource in the '
        "model configuration.$"
    )
    with pytest.raises(RateLimitError, match=message):
        limits.check("v3", {(0, "resource1"): 2, (0, "resource2"): 2})
    limits.check("v2", {(0, "resource2"): 2})  # a reload of v2 replaces its own needs


def test_two_loads_at_once_see_each_other_s_scope_and_a_failed_load_withdraws() -> None:
    limits = ResourceLimits(RateLimitMode.EXECUTION_COUNT)
    limits.check("v2", {(GLOBAL, "resource2"): 2})  # loading, not loaded yet
    with pytest.raises(RateLimitError, match="both global and device-specific"):
        limits.check("v3", {(0, "resource2"): 2})
    limits.withdraw("v2")  # v2's load failed
    limits.check("v3", {(0, "resource2"): 2})
