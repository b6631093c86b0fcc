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
    L0_rate_limiter  test.sh's starts: the refused ones (resource counts below an instance's
                 need, a resource both global and per device) and rate_limiter_test.py's
                 cross-model priority, single-model and sequence tests, each on the repository
                 as test.sh has edited it by then; its KIND_GPU instances are KIND_CPU here
                 (both count on device 0), Triton's C++ `identity` and `sequence` backends
                 Python models. Left out: test_single_model_dynamic_batching (its start sets
                 TRITONSERVER_DELAY_SCHEDULER, a Triton test hook that holds the scheduler
                 until 8 requests are queued: the batch sizes it asserts come from it) and
                 test.sh's comparison of two runs' wall times
    L0_sequence_corrid_batcher  sequence_corrid_batcher_test.py's one test (test_skip_batch) on
                 test.sh's models4: qa_dyna_sequence_model_repository's models made direct
                 (its `sed -z`), max_batch_size 1, 4 instances; the ONNX model under the
                 graphdef / savedmodel / plan names the test loops over
    L0_dyna_implicit_state  L0_dyna_sequence_batcher's test.sh with IMPLICIT_STATE=1 (its
                 test.sh does only that): the 9 tests on gen_qa_dyna_sequence_implicit_models.py's
                 ONNX models (BACKENDS="onnx plan": no TensorRT here)
    L0_iterative_sequence  iterative_sequence_e2e.py's six tests on one explicit-mode start, as
                 test.sh; its `backend: "iterative_sequence"` (Triton's C++ test backend) is a
                 Python-based backend of that name (`--backend-directory`) doing what it does
    L0_grpc_state_cleanup  cleanup_test.py's 18 tests, one start each as test.sh; models:
                 custom_zero_1_float32 (Triton's C++ `identity`: a Python model sleeping 1 s) and
                 python_backend's examples/decoupled repeat_int32 (and a non-decoupled copy).
                 Left out: test.sh's check after each start that Triton's verbose log counts as
                 many gRPC state releases as creations (lines of its C++ front end's)
    L0_sequence_stress  sequence_stress.py on test.sh's three repositories (custom_sequence_int32
                 batching 4 x 1 instance, 2 x 2, 1 x 4; Triton's C++ `sequence` backend a
                 Python accumulator): 8 threads of valid, unended and unstarted sequences, 20
                 iterations each (test.sh: 200), seed 0; a row per repository, passed when it
                 exits 0
"""

from __future__ import annotations

from functools import partial

from tests.conformance.qa_sequence_suites import dyna_runs
from tests.conformance.qa_suite import Run, Suite
from tests.fixtures.triton_qa_sched_repos import (
    RATE_LIMITER_STAGES,
    build_corrid_repo,
    build_iterative_sequence_backends,
    build_iterative_sequence_repo,
    build_metrics_cpu_repo,
    build_metrics_namespace_repo,
    build_metrics_queue_size_repo,
    build_metrics_unit_repo,
    build_rate_limiter_repo,
    build_sequence_stress_repo,
    build_state_cleanup_repo,
)
from tests.fixtures.triton_qa_sequence_repos import build_dyna_sequence_repo

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


_RATE = "--rate-limit=execution_count"
_R1_MIN_4 = (
    'Resource count for "resource1" is limited to {} which will prevent scheduling of one or '
    "more model instances, the minimum required count is 4"
)


def _rate_limiter_runs() -> tuple[Run, ...]:
    """test.sh's starts in its order: three refused for too little resource1, one for
    resource2 both global and per device, the cross-model tests, test_single_model twice,
    a refused start, the sequence test."""
    test = "rate_limiter_test.RateLimiterTest."

    def refused(label: str, repo: str, args: tuple[str, ...], text: str) -> Run:
        return Run(label, repo, (_RATE, *args), refusal=text)

    return (
        refused("resource1:1 refused", "models_initial", ("--rate-limit-resource=resource1:1",),
                _R1_MIN_4.format(1)),
        refused("resource1:3 refused", "models_initial",
                ("--rate-limit-resource=resource1:3", "--rate-limit-resource=resource2:2"),
                _R1_MIN_4.format(3)),
        refused("resource1:10:10 refused", "models_initial",
                ("--rate-limit-resource=resource1:10:10", "--rate-limit-resource=resource2:2"),
                _R1_MIN_4.format(0)),
        refused("resource2 global and per device refused", "models_conflict", (),
                'Resource "resource2" is present as both global and device-specific resource '
                "in the model configuration."),
        Run(f"{test}test_cross_model_prioritization_limited_resource", "models_initial",
            (_RATE, "--rate-limit-resource=resource1:4", "--rate-limit-resource=resource2:2"),
            label="resource1:4"),
        Run(f"{test}test_cross_model_prioritization_limited_resource", "models_initial",
            (_RATE,), label="no explicit resources"),
        Run(f"{test}test_cross_model_prioritization_plenty_resource", "models_initial",
            (_RATE, "--rate-limit-resource=resource1:6", "--rate-limit-resource=resource2:2")),
        Run(f"{test}test_single_model", "models_single", (_RATE,), label="limited"),
        Run(f"{test}test_single_model", "models_single",
            (_RATE, "--rate-limit-resource=resource1:6", "--rate-limit-resource=resource2:2"),
            label="plenty"),
        refused("resource1:3 refused (two groups)", "models_single",
                ("--rate-limit-resource=resource1:3", "--rate-limit-resource=resource2:2"),
                _R1_MIN_4.format(3)),
        Run(f"{test}test_single_model_sequence_batching", "models_sequence", (_RATE,)),
    )  # fmt: skip


def _state_cleanup_runs() -> tuple[Run, ...]:
    """test.sh's starts, one per test: `--log-verbose=2`; the error-status ones with its
    restricted inference protocol; the shutdown ones given the server's pid (the test
    interrupts it); test_decoupled_infer_complete reading the server's log."""
    test = "cleanup_test.CleanUpTest."
    verbose = ("--log-verbose=2",)
    restricted = (*verbose, "--grpc-restricted-protocol=inference:infer-key=infer-value")
    plain = (
        "test_simple_infer",
        "test_simple_infer_cancellation",
        "test_simple_infer_timeout",
        "test_streaming_infer",
        "test_streaming_timeout",
        "test_streaming_cancellation",
        "test_decoupled_infer",
        "test_decoupled_cancellation",
        "test_decoupled_timeout",
        "test_non_decoupled_streaming_multi_response",
    )
    errors = (
        "test_simple_infer_error_status",
        "test_streaming_error_status",
        "test_decoupled_error_status",
    )
    shutdowns = (
        "test_simple_infer_shutdownserver",
        "test_streaming_infer_shutdownserver",
        "test_decoupled_infer_shutdownserver",
        "test_decoupled_infer_with_params_shutdownserver",
    )
    log = "inference_server.test_decoupled_infer_complete.log"
    return (
        *(Run(f"{test}{t}", "models", verbose) for t in plain),
        *(Run(f"{test}{t}", "models", restricted) for t in errors),
        # Run as test.sh runs them, a script: the test reads SERVER_PID in its `__main__`.
        *(Run("cleanup_test", "models", verbose, label=t, script_args=(f"CleanUpTest.{t}",),
              pass_pid=True) for t in shutdowns),
        Run(f"{test}test_decoupled_infer_complete", "models", verbose, server_log=log,
            env=(("SERVER_LOG", log),)),
    )  # fmt: skip


# L0_sequence_stress: test.sh's three repositories; its default 200 iterations per thread made
# 20 (the short variant), the seed fixed so that a failure can be replayed.
_STRESS_TRIALS = (1, 2, 4)
_STRESS_ITERATIONS = 20

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
    Suite(
        "L0_rate_limiter",
        ("rate_limiter_test.py",),
        {
            f"models_{stage}": partial(build_rate_limiter_repo, stage=stage)
            for stage in RATE_LIMITER_STAGES
        },
        _rate_limiter_runs(),
        beside=("qa/common/sequence_util.py",),
    ),
    Suite(
        "L0_sequence_corrid_batcher",
        ("sequence_corrid_batcher_test.py",),
        {"models4": build_corrid_repo},
        (
            Run(
                "sequence_corrid_batcher_test.SequenceCorrIDBatcherTest.test_skip_batch",
                "models4",
                env=(
                    ("NO_BATCHING", "0"),
                    ("MODEL_INSTANCES", "4"),
                    # test.sh's exports, which the test asserts: Triton's scheduler hook
                    # (hold the scheduler until 12 requests are queued) has nothing to change
                    # here, each of the 4 instances executing batches of one (max_batch_size 1),
                    # 12 executions of 1 either way.
                    ("TRITONSERVER_DELAY_SCHEDULER", "12"),
                    ("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", "0"),
                ),
            ),
        ),
        beside=("qa/common/sequence_util.py",),
    ),
    Suite(
        "L0_dyna_implicit_state",
        (),
        {
            "models": partial(build_dyna_sequence_repo, multi=False, implicit=True),
            "multi_models": partial(build_dyna_sequence_repo, multi=True, implicit=True),
        },
        dyna_runs(implicit=True),
        beside=(
            "qa/L0_dyna_sequence_batcher/dyna_sequence_batcher_test.py",
            "qa/common/sequence_util.py",
        ),
    ),
    Suite(
        "L0_sequence_stress",
        ("sequence_stress.py",),
        {
            f"models{trial}": partial(build_sequence_stress_repo, trial=trial)
            for trial in _STRESS_TRIALS
        },
        tuple(
            Run(
                "sequence_stress",
                f"models{trial}",
                label=f"models{trial}",
                script_args=("--iterations", str(_STRESS_ITERATIONS), "--random-seed", "0"),
            )
            for trial in _STRESS_TRIALS
        ),
        beside=("qa/common/sequence_util.py",),
    ),
    Suite(
        "L0_iterative_sequence",
        ("iterative_sequence_e2e.py",),
        {"models": build_iterative_sequence_repo, "backends": build_iterative_sequence_backends},
        (
            Run(
                "iterative_sequence_e2e",
                "models",
                ("--model-control-mode=EXPLICIT", "--backend-directory={qa_dir}/backends"),
            ),
        ),
    ),
    Suite(
        "L0_grpc_state_cleanup",
        ("cleanup_test.py",),
        {"models": build_state_cleanup_repo},
        _state_cleanup_runs(),
    ),
)
