"""`--metrics-config`'s grammar, as Triton's core reads it; `--allow-cpu|gpu-metrics`."""

from __future__ import annotations

import argparse

import pytest

from thawserver.metrics_config_flags import (
    DEFAULT_QUANTILES,
    MetricsSettings,
    add_metrics_config_argument,
    metrics_settings,
    parse_metrics_config,
)


def test_no_flag_keeps_the_counters_and_no_summaries() -> None:
    assert parse_metrics_config([]) == MetricsSettings(True, False, DEFAULT_QUANTILES)


def test_summaries_on_counters_off_and_a_group_prefix() -> None:
    settings = parse_metrics_config(["summary_latencies=true", "global,counter_latencies=false"])
    assert (settings.counter_latencies, settings.summary_latencies) == (False, True)


def test_quantiles_are_read_as_std_stod_reads_them() -> None:
    # L0_metrics' own value: "0.0.1" is 0.0 to std::stod, and the pair is kept.
    settings = parse_metrics_config(["summary_quantiles=0.1:0.0.1,0.7:0.01,0.75:0.01"])
    assert settings.summary_quantiles == ((0.1, 0.0), (0.7, 0.01), (0.75, 0.01))


def test_a_pair_without_its_colon_is_skipped_and_none_left_keeps_the_defaults() -> None:
    assert parse_metrics_config(["summary_quantiles=0.5:0.05,0.9"]).summary_quantiles == (
        (0.5, 0.05),
    )
    assert parse_metrics_config(["summary_quantiles=oops"]).summary_quantiles == DEFAULT_QUANTILES


def test_a_value_without_equals_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="Got summary_latencies"):
        parse_metrics_config(["summary_latencies"])


def test_settings_round_trip_through_the_flags_given_to_replicas() -> None:
    settings = parse_metrics_config(["summary_latencies=true", "summary_quantiles=0.5:0.1"])
    args = settings.to_args()
    assert parse_metrics_config(list(args[1::2])) == settings
    assert MetricsSettings().to_args() == ()


def test_allow_cpu_and_gpu_metrics_parse_as_tritonserver_spells_them_and_reach_replicas() -> None:
    parser = argparse.ArgumentParser()
    add_metrics_config_argument(parser)
    assert metrics_settings(parser.parse_args([])) == MetricsSettings()
    args = parser.parse_args(["--allow-cpu-metrics=0", "--allow-gpu-metrics", "off"])
    settings = metrics_settings(args)
    assert (settings.cpu_gauges, settings.gpu_gauges) == (False, False)
    assert settings.to_args() == ("--allow-cpu-metrics=false", "--allow-gpu-metrics=false")
    assert metrics_settings(parser.parse_args(list(settings.to_args()))) == settings
    with pytest.raises(SystemExit):
        parser.parse_args(["--allow-gpu-metrics=maybe"])
