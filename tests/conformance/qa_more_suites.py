"""More of Triton's QA suites of inference semantics, as suites of tests.conformance.triton_qa.
Repositories: tests/fixtures/triton_qa_more_repos.py.

    L0_nan_inf          nan_inf_test.py (HTTP raw / HTTP / gRPC) on its Python `nan_inf_output`;
                        its `np.NINF` is `-np.inf` there (`Suite.edits`) and in the model
                        (NumPy 2, installed here, removed the alias)
    L0_output_name      output_name_test.py: an unknown requested output refused in Triton's
                        words, on gen_qa_identity_models.py's `*_nobatch_zero_1_float32`; the
                        ONNX one stands in for the graphdef, plan and savedmodel names it names
    L0_scalar_io        scalar_test.py on gen_qa_ort_scalar_models.py's ONNX models (test.sh's
                        BACKENDS="onnx"), then test.sh's second start, refused: `onnx_scalar_1dim`
                        with `dims:[2]`
    L0_output_validation  lt_op_val_client.py (`--exit-on-error=false`): a TorchScript model's
                        output of another datatype than its config's, or an `OUTPUT__1` it does
                        not return, fails the request in Triton's words; Triton's data
                        directory's `libtorch_model_store2` (no gen_qa script makes it) is
                        gen_qa_identity_models.py's libtorch_zero_1_float32 and two copies
                        whose configs say so
    L0_optional_input   optional_input_test.py, one server start per test as test.sh runs it
                        (`--log-verbose=1`): optional inputs through the dynamic batcher and
                        ensembles; `identity_2_float32` runs Triton's C++ `identity` backend,
                        a Python model doing what it does here
    L0_simple_ensemble  ensemble_test.py's three tests, one server start each as test.sh runs
                        them; `simple` (docs/examples' graphdef add/sub, versions 1 and 2) is a
                        Python add/sub
    L0_client_timeout   client_infer_timeout_test.py's five tests (gRPC, gRPC async and stream,
                        HTTP, HTTP async) on test.sh's second start: `custom_identity_int32`
                        (Triton's C++ `identity` backend, `execute_delay_ms` 3000) is a Python
                        model sleeping as long. Left out: the C++ client_timeout_test runs (a
                        binary of Triton's build) and client_non_infer_timeout_test.py (its
                        start sets TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC, a test hook of
                        Triton's server that delays every non-infer gRPC answer)
    L0_server_status    server_status_test.py: test.sh's poll-mode start, ServerMetadataTest,
                        the repository edited, ModelMetadataTest
                        (tests/conformance/qa_server_status.py); its graphdef / plan models are
                        gen_qa_models.py's ONNX ones under those names
    L0_request_cancellation  grpc_cancellation_test.py's four tests, one start each (10 s
                        executions), scheduler_test.py (dynamic and sequence batchers, an
                        ensemble: 6 s executions) and implicit_state_test.py (its TorchScript
                        model), as test.sh starts them; Triton's C++ `identity` models are
                        Python models sleeping `execute_delay_ms`. Left out: its
                        request_cancellation_test (a C++ binary of Triton's build) and
                        test_grpc_async_infer_cancellation_at_step_start (its start sets
                        TRITONSERVER_DELAY_GRPC_PROCESS, a test hook of Triton's server).
                        test.sh's grep of each grpc_cancellation_test start's log for
                        "Cancellation notification received for" is a row of its own
    L0_model_queue      model_queue_test.py's seven tests, one server start each with test.sh's
                        config for it (queue size, timeout policies, priority levels);
                        qa/custom_models' custom_zero_1_float32 (Triton's C++ `identity`
                        backend) is a Python model sleeping `execute_delay_ms`.
                        test_policy_reject fails on purpose: Triton 2.51 counts a failed
                        ensemble request twice in its failure counter (docs/triton-qa-parity.md)
    L0_repoagent_checksum  test.sh's two starts: identity_int32, whose config's checksum agent
                        names a wrong MD5 for `1/libtriton_identity.so`, refuses the start
                        (the log has "'identity_int32': Mismatched MD5 hash for file ..."); with
                        the file's MD5 written in, identity_test.py over HTTP and gRPC. Triton's
                        C++ `identity` backend is a Python model, its library a stand-in file
    L0_passive_instance passive_instance_test.py: a model with a KIND_CPU group and a passive
                        KIND_GPU group; Triton's C++ `distributed_addsub` backend is a Python
                        add/sub whose GPU instance fails any request (test.sh's grep that the
                        passive instance executed nothing). Left out: its perf_analyzer run
"""

from __future__ import annotations

from functools import partial

from tests.conformance.qa_server_status import L0_SERVER_STATUS
from tests.conformance.qa_suite import Run, Suite
from tests.fixtures.triton_qa_more_repos import (
    MODEL_QUEUE_BATCHING,
    build_cancellation_grpc_repo,
    build_cancellation_scheduler_repo,
    build_cancellation_state_repo,
    build_checksum_repo,
    build_client_timeout_repo,
    build_model_queue_repo,
    build_nan_inf_repo,
    build_optional_input_repo,
    build_output_name_repo,
    build_output_validation_repo,
    build_passive_repo,
    build_scalar_refused_repo,
    build_scalar_repo,
    build_simple_ensemble_repo,
)

__all__ = ["MORE_SUITES"]

# test.sh's TEST_CASES, each on its own server start ("to clear model stats").
_OPTIONAL_TESTS = (
    "test_all_inputs",
    "test_optional_same_input",
    "test_optional_mix_inputs",
    "test_optional_mix_inputs_2",
    "test_ensemble_all_inputs",
    "test_ensemble_optional_same_input",
    "test_ensemble_optional_mix_inputs",
    "test_ensemble_optional_mix_inputs_2",
    "test_ensemble_optional_pipeline",
    "test_ensemble_optional_connecting_tensor",
)

MORE_SUITES = (
    Suite(
        "L0_nan_inf",
        ("nan_inf_test.py",),
        {"models": build_nan_inf_repo},
        (Run("nan_inf_test", "models"),),
        edits=(("nan_inf_test.py", "np.NINF", "-np.inf"),),
    ),
    Suite(
        "L0_output_name",
        ("output_name_test.py",),
        {"models": build_output_name_repo},
        (Run("output_name_test.OutputNameValidationTest", "models"),),
    ),
    Suite(
        "L0_scalar_io",
        ("scalar_test.py",),
        {"models": build_scalar_repo, "models_dims_2": build_scalar_refused_repo},
        (
            Run("scalar_test", "models", env=(("BACKENDS", "onnx"),)),
            Run(
                "onnx_scalar_1dim with dims [2] refused",
                "models_dims_2",
                refusal=(
                    "model 'onnx_scalar_1dim', tensor 'INPUT': the model expects 0 dimensions "
                    "(shape []) but the model configuration specifies 1 dimensions (shape [2])"
                ),
            ),
        ),
    ),
    Suite(
        "L0_output_validation",
        ("lt_op_val_client.py",),
        {"libtorch_model_store2": build_output_validation_repo},
        (Run("lt_op_val_client", "libtorch_model_store2", ("--exit-on-error=false",)),),
    ),
    Suite(
        "L0_optional_input",
        ("optional_input_test.py",),
        {"models": build_optional_input_repo},
        tuple(
            Run(f"optional_input_test.OptionalInputTest.{test}", "models", ("--log-verbose=1",))
            for test in _OPTIONAL_TESTS
        ),
    ),
    Suite(
        "L0_simple_ensemble",
        ("ensemble_test.py",),
        {"models": build_simple_ensemble_repo},
        tuple(
            Run(f"ensemble_test.EnsembleTest.{test}", "models")
            for test in (
                "test_ensemble_add_sub",
                "test_ensemble_sequence_flags",
                "test_ensemble_add_sub_one_output",
            )
        ),
    ),
    Suite(
        "L0_client_timeout",
        ("client_infer_timeout_test.py",),
        {"models": build_client_timeout_repo},
        (Run("client_infer_timeout_test", "models", ("--log-verbose", "2")),),
    ),
    L0_SERVER_STATUS,
    Suite(
        "L0_request_cancellation",
        ("grpc_cancellation_test.py", "scheduler_test.py", "implicit_state_test.py"),
        {
            "models_grpc": build_cancellation_grpc_repo,
            "models_scheduler": build_cancellation_scheduler_repo,
            "models_state": build_cancellation_state_repo,
        },
        (
            *(
                Run(
                    f"grpc_cancellation_test.GrpcCancellationTest.{test}",
                    "models_grpc",
                    ("--log-verbose=1",),
                    log_expects="Cancellation notification received for",
                )
                for test in (
                    "test_grpc_async_infer",
                    "test_grpc_stream_infer",
                    "test_aio_grpc_async_infer",
                    "test_aio_grpc_stream_infer",
                )
            ),
            Run("scheduler_test", "models_scheduler", ("--log-verbose=2",)),
            Run(
                "implicit_state_test",
                "models_state",
                ("--log-verbose=1",),
                server_log="implicit_state_test.server.log",
                env=(("SERVER_LOG", "implicit_state_test.server.log"),),
            ),
        ),
    ),
    Suite(
        "L0_model_queue",
        ("model_queue_test.py",),
        {f"models_{t}": partial(build_model_queue_repo, test=t) for t in MODEL_QUEUE_BATCHING},
        tuple(
            Run(f"model_queue_test.ModelQueueTest.{t}", f"models_{t}") for t in MODEL_QUEUE_BATCHING
        ),
    ),
    Suite(
        "L0_repoagent_checksum",
        ("identity_test.py",),
        {"models": build_checksum_repo, "models_fixed": partial(build_checksum_repo, fixed=True)},
        (
            Run(
                "identity_int32 with a wrong MD5 refused",
                "models",
                refusal="'identity_int32': Mismatched MD5 hash for file 1/libtriton_identity.so",
            ),
            *(
                Run("identity_test", "models_fixed", label=p, script_args=("-i", p, "-v"))
                for p in ("http", "grpc")
            ),
        ),
    ),
    Suite(
        "L0_passive_instance",
        ("passive_instance_test.py",),
        {"models": build_passive_repo},
        (Run("passive_instance_test", "models", ("--exit-timeout-secs=120",)),),
    ),
)
