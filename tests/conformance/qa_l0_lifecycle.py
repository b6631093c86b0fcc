"""Triton's qa/L0_lifecycle as a suite of tests.conformance.triton_qa: the server starts of its
test.sh whose models Thaw serves, each with test.sh's own flags, one lifecycle_test.py test per
start (repositories: tests/fixtures/triton_qa_lifecycle_repos.py).

    test_parse_error_noexit            4 starts: a missing repository (/tmp/xyzx), alone and
                                       beside an empty one, --strict-readiness=true|false,
                                       --exit-on-error=false; the server answers, neither live
                                       nor ready (test.sh's run_server_nowait)
    test_config_override               ONNX, explicit mode, a load with a JSON config override
    test_file_override(_security)      ONNX, a load with override files (two starts: test.sh
                                       runs both tests against one)
    test_concurrent_model_instance_load_speedup   Python, two instances sleeping 10 s each
    test_shutdown_while_loading        Python, the server stopped while a load is under way
    test_shutdown_with_live_connection Python add_sub, SIGINT with a keep-alive connection open
    test_load_new_model_version        Python, per-version reloads read from the server's log

LEFT_OUT names every other test of lifecycle_test.py, and test.sh's checks that are no unittest,
with the reason.
"""

from __future__ import annotations

from tests.conformance.qa_suite import Run, Suite
from tests.fixtures.triton_qa_lifecycle_repos import (
    build_add_sub_repo,
    build_config_override_repo,
    build_empty_repo,
    build_file_override_repo,
    build_new_version_repo,
    build_slow_init_repo,
    build_slow_load_repo,
)
from thawwire.server_info import server_version

__all__ = ["L0_LIFECYCLE", "LEFT_OUT"]

_TEST = "lifecycle_test.LifeCycleTest."
_MISSING_REPO = "/tmp/xyzx"  # test.sh's repository that does not exist
_NOEXIT = ("--exit-on-error=false",)
# test_parse_error_noexit compares the server's metadata version with $TRITON_SERVER_VERSION,
# which Triton's container sets to its own version: Thaw's here.
_VERSION_ENV = (("TRITON_SERVER_VERSION", server_version()),)
_SERVER_LOG = "inference_server.log"
_ONNX = "onnx_float32_float32_float32"

_TF_TRT = "its models are graphdef / savedmodel / plan (no TensorFlow or TensorRT here)"
_CUSTOM = "its models use Triton's C++ test backends (identity / custom_zero / sequence)"
LEFT_OUT: dict[str, str] = {
    **{
        test: _TF_TRT
        for test in (
            "test_parse_error_modelfail",
            "test_parse_error_modelfail_nostrict",
            "test_parse_error_no_model_config",
            "test_init_error_modelfail",
            "test_parse_error_model_no_version",
            "test_parse_ignore_zero_prefixed_version",
            "test_parse_ignore_non_intergral_version",
            "test_dynamic_model_load_unload",
            "test_dynamic_model_load_unload_disabled",
            "test_dynamic_version_load_unload",
            "test_dynamic_version_load_unload_disabled",
            "test_dynamic_model_modify",
            "test_dynamic_file_delete",
            "test_multiple_model_repository_polling",
            "test_multiple_model_repository_control",
            "test_model_control",
            "test_model_control_fail",
            "test_model_control_ensemble",
            "test_multiple_model_repository_control_startup_models",
            "test_model_repository_index",
            "test_load_same_model_different_platform",
            "test_add_custom_config",
            "test_delete_custom_config",
        )
    },
    **{
        test: _CUSTOM
        for test in (
            "test_model_availability_on_reload",
            "test_model_availability_on_reload_2",
            "test_model_availability_on_reload_3",
            "test_model_reload_fail",
            "test_shutdown_dynamic",
            "test_shutdown_sequence",
            "test_shutdown_ensemble",
            "test_concurrent_model_load_speedup",
            "test_concurrent_model_load",
            "test_concurrent_model_load_unload",
            "test_concurrent_same_model_load_unload_stress",
            "test_model_config_overwite",
            "test_shutdown_while_background_unloading",
        )
    },
    "test_load_gpu_limit": "a GPU test (cuda_memory_consumer, --model-load-gpu-limit)",
    "test_concurrent_model_instance_load_sanity": "loads KIND_GPU instances (no GPU here)",
    "test.sh: port collisions": "two servers at once on Triton's ports (one at a time here)",
    "test.sh: load retry": "--model-load-retry-count (thaw serve has no such flag)",
    "test.sh: control API in poll mode, invalid endpoints": "graphdef / int32 TF models",
    "test.sh: log greps after a test": "grep Triton core's internal log lines "
    "(`OnLoadFinal()`, `AsyncUnload()`, in-flight counts)",
}


def _noexit(label: str, repo: str, *flags: str) -> Run:
    return Run(
        _TEST + "test_parse_error_noexit", repo, (*flags, *_NOEXIT),
        env=_VERSION_ENV, label=label, ready=False,
    )  # fmt: skip


def _runs() -> tuple[Run, ...]:
    file_override = (
        "--model-control-mode=explicit", f"--load-model={_ONNX}", "--strict-model-config=false",
    )  # fmt: skip
    return (
        _noexit("missing repository, strict", _MISSING_REPO, "--strict-readiness=true"),
        _noexit("missing repository", _MISSING_REPO, "--strict-readiness=false"),
        _noexit(
            "missing and empty repositories, strict",
            _MISSING_REPO,
            "--model-repository={qa_dir}/empty",
            "--strict-readiness=true",
        ),
        _noexit(
            "empty and missing repositories",
            "empty",
            f"--model-repository={_MISSING_REPO}",
            "--strict-readiness=false",
        ),
        Run(
            _TEST + "test_config_override",
            "config_override",
            (
                "--model-repository={qa_dir}/config_override",
                "--model-control-mode=explicit",
                "--strict-model-config=false",
            ),
        ),
        Run(_TEST + "test_file_override", "file_override", file_override, link="models"),
        Run(_TEST + "test_file_override_security", "file_override", file_override),
        Run(
            _TEST + "test_concurrent_model_instance_load_speedup",
            "slow_init",
            ("--model-control-mode=explicit",),
        ),
        Run(
            _TEST + "test_shutdown_while_loading",
            "slow_load",
            ("--model-control-mode=explicit", "--log-verbose=2"),
        ),
        Run(
            _TEST + "test_shutdown_with_live_connection",
            "add_sub",
            (),
            env=(("SERVER_LOG", _SERVER_LOG),),
            server_log=_SERVER_LOG,
            pass_pid=True,
        ),
        Run(
            _TEST + "test_load_new_model_version",
            "new_version",
            ("--model-control-mode=explicit", "--load-model=*"),
            env=(("SERVER_LOG", _SERVER_LOG),),
            server_log=_SERVER_LOG,
            link="models",
        ),
    )


L0_LIFECYCLE = Suite(
    "L0_lifecycle",
    ("lifecycle_test.py",),
    {
        "empty": build_empty_repo,
        "config_override": build_config_override_repo,
        "file_override": build_file_override_repo,
        "slow_init": build_slow_init_repo,
        "slow_load": build_slow_load_repo,
        "add_sub": build_add_sub_repo,
        "new_version": build_new_version_repo,
    },
    _runs(),
)
