"""Triton's QA suites of metrics and scheduling as suites of tests.conformance.triton_qa
(repositories: tests/fixtures/triton_qa_sched_repos.py).

    L0_metrics   metrics_config_test.py, one server start per test and test.sh start (its
                 `--metrics-config` counters / summaries / cache / quantile starts on
                 unit_test_models, explicit mode; the namespacing-off start);
                 metrics_queue_size_test.py's six tests on one start (nv_inference_pending_
                 request_count, nv_inference_count and nv_inference_exec_count per scheduler;
                 Triton's C++ `identity` backend a Python model sleeping `execute_delay_ms`);
                 cpu_metrics_test.py under pytest (`--metrics-interval-ms=1000`). Left out:
                 the metrics_api_test gtest binary, the pinned-memory, GPU-peer, GPU-count and
                 energy-interval starts (CUDA pinned host memory, nvidia-smi, NVML on two GPUs),
                 test_model_namespacing_label_with_namespace_on (it asserts
                 `/opt/tritonserver/qa/...` namespaces: Triton's container paths)
"""

from __future__ import annotations

from tests.conformance.qa_suite import Run, Suite
from tests.fixtures.triton_qa_sched_repos import (
    build_metrics_cpu_repo,
    build_metrics_namespace_repo,
    build_metrics_queue_size_repo,
    build_metrics_unit_repo,
)

__all__ = ["SCHED_SUITES"]

_EXPLICIT = ("--model-control-mode=explicit", "--load-model=identity_cache_off")
_SUMMARIES = ("--metrics-config", "summary_latencies=true")
_NO_COUNTERS = ("--metrics-config", "counter_latencies=false")
_WITH_COUNTERS = ("--metrics-config", "counter_latencies=true")
_QUANTILES = "0.1:0.0.1,0.7:0.01,0.75:0.01"

# test.sh's metrics_config_test.py starts: (label, flags, the tests it runs on that start).
_CONFIG_STARTS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "default",
        _EXPLICIT,
        ("test_inf_counters_exist", "test_inf_summaries_missing",
         "test_cache_counters_missing", "test_cache_summaries_missing"),
    ),
    (
        "summaries",
        (*_EXPLICIT, *_SUMMARIES),
        ("test_inf_counters_exist", "test_inf_summaries_exist",
         "test_cache_counters_missing", "test_cache_summaries_missing"),
    ),
    (
        "summaries no counters",
        (*_EXPLICIT, *_SUMMARIES, *_NO_COUNTERS),
        ("test_inf_counters_missing", "test_inf_summaries_exist",
         "test_cache_counters_missing", "test_cache_summaries_missing"),
    ),
    (
        "cache",
        ("--model-control-mode=explicit", "--cache-config", "local,size=1048576",
         "--load-model=identity_cache_on", *_SUMMARIES, *_WITH_COUNTERS),
        ("test_inf_counters_exist", "test_inf_summaries_exist_with_cache",
         "test_cache_counters_exist", "test_cache_summaries_exist"),
    ),
    (
        "quantiles",
        (*_EXPLICIT, *_SUMMARIES, "--metrics-config", f"summary_quantiles={_QUANTILES}"),
        ("test_summaries_custom_quantiles",),
    ),
)  # fmt: skip


def _metrics_runs() -> tuple[Run, ...]:
    runs = [
        Run(
            f"metrics_config_test.MetricsConfigTest.{test}",
            "unit_test_models",
            flags,
            env=(("SUMMARY_QUANTILES", _QUANTILES),),
            label=label,
        )
        for label, flags, tests in _CONFIG_STARTS
        for test in tests
    ]
    runs.append(
        Run(
            "metrics_config_test.MetricsConfigTest.test_model_namespacing_label_with_namespace_off",
            "model_namespacing_repos/addsub_repo",
            ("--model-namespacing=false", "--allow-metrics=true"),
            label="namespace off",
        )
    )
    runs.append(
        Run(
            "metrics_config_test.MetricsConfigTest.test_model_namespacing_label_with_namespace_on",
            "model_namespacing_repos/addsub_repo",
            ("--model-namespacing=true", "--model-repository={qa_dir}/model_namespacing_repos/"
             "subadd_repo", "--allow-metrics=true"),
            label="namespace on",
        )
    )  # fmt: skip
    runs.append(Run("metrics_queue_size_test", "queue_size_models", ("--log-verbose=1",)))
    runs.append(
        Run(
            "cpu_metrics_test",
            "models",
            ("--metrics-interval-ms=1000", "--log-verbose=1"),
            pytest=True,
        )
    )
    return tuple(runs)


SCHED_SUITES = (
    Suite(
        "L0_metrics",
        ("metrics_config_test.py", "metrics_queue_size_test.py", "cpu_metrics_test.py"),
        {
            "unit_test_models": build_metrics_unit_repo,
            "model_namespacing_repos": build_metrics_namespace_repo,
            "queue_size_models": build_metrics_queue_size_repo,
            "models": build_metrics_cpu_repo,
        },
        _metrics_runs(),
        deselect=(
            (
                "test_model_namespacing_label_with_namespace_on",
                "it asserts the namespaces `/opt/tritonserver/qa/L0_metrics/...`, the paths of "
                "Triton's CI container",
            ),
        ),
    ),
)
