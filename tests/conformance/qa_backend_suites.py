"""Triton's QA suites about the model backends Thaw serves (ONNX, TorchScript, Python), on
models of Triton's own qa/common/gen_qa_*.py, as suites of tests.conformance.triton_qa.

    L0_infer_reshape    infer_reshape_test.py's 8 tests (one server start, as test.sh): every
                        framework's reshape models and the reshape ensembles; the
                        TensorFlow / TensorRT names and the ensembles' `nop_*` steps are
                        stand-ins (tests/fixtures/triton_qa_reshape_repos.py)
"""

from __future__ import annotations

from functools import partial

from tests.conformance.qa_suite import Run, Suite
from tests.fixtures.triton_qa_batch_input_repos import build_batch_input_repo
from tests.fixtures.triton_qa_cache_repos import CHECK_SCRIPT
from tests.fixtures.triton_qa_infer_repos import build_infer_repo, build_infer_variable_repo
from tests.fixtures.triton_qa_libtorch_repos import (
    build_flag_repo,
    build_invalid_types_repo,
    build_io_names_repo,
    build_shared_weights_repo,
)
from tests.fixtures.triton_qa_reshape_repos import build_infer_reshape_repo

__all__ = ["BACKEND_SUITES"]

# test.sh's three refusals: the repository -> the text it greps in the server's log.
_INVALID_TYPES = {
    "input": "unsupported datatype TYPE_UINT32 for input 'INPUT0' for model "
    "'libtorch_invalid_input_type'",
    "output": "unsupported datatype TYPE_UINT64 for output 'OUTPUT__0' for model "
    "'libtorch_invalid_output_type'",
    "sequence": "input 'CORRID__2' type 'TYPE_UINT32' is not supported by PyTorch.",
}
# test.sh's starts: (instance kind, weight sharing, how many log lines say a model is reused).
_SHARED_WEIGHTS = (("KIND_GPU", False, 0), ("KIND_CPU", True, 15), ("KIND_GPU", True, 15))
_SHARED_WEIGHTS_ARGS = ("--exit-on-error=false", "--exit-timeout-secs=10")
_SERVER_LOG = "inference_server.log"


def _repo_name(kind: str, shared: bool) -> str:
    return f"models_{kind.lower()}{'_shared' if shared else ''}"


def _shared_weights_runs() -> tuple[Run, ...]:
    runs = []
    for kind, shared, reused in _SHARED_WEIGHTS:
        repo = _repo_name(kind, shared)
        label = f"{kind}{' ENABLE_WEIGHT_SHARING' if shared else ''}"
        runs.append(Run("libtorch_shared_weights_test.SharedWeightsTest.test_pytorch_identity_model",
                        repo, _SHARED_WEIGHTS_ARGS, label=label))  # fmt: skip
        runs.append(Run(
            CHECK_SCRIPT, repo, _SHARED_WEIGHTS_ARGS,
            label=f"{label}: the test, then {reused} reuse lines", server_log=_SERVER_LOG,
            script_args=("--after", "libtorch_shared_weights_test.py", "--log", _SERVER_LOG,
                         "--count", "Reusing TorchScript model for instance", str(reused)),
        ))  # fmt: skip
    return tuple(runs)


def _flag_runs(key: str, words: str, *, on_when: str) -> tuple[Run, ...]:
    """test.sh's two starts of a libtorch flag's suite: libtorch_infer_client.py, then the
    server log's count of "`words` enabled|disabled" (`on_when`: the flag that enables)."""
    runs = []
    for flag in ("true", "false"):
        line = f"{words} {'enabled' if flag == on_when else 'disabled'}"
        runs.append(Run(
            "libtorch_infer_client", f"models_{flag}", ("--log-verbose=1",),
            label=f"{key}={flag}",
        ))  # fmt: skip
        runs.append(Run(
            CHECK_SCRIPT, f"models_{flag}", ("--log-verbose=1",),
            label=f"{key}={flag}: the client, then 3 lines", server_log=_SERVER_LOG,
            script_args=("--after", "libtorch_infer_client.py", "--log", _SERVER_LOG,
                         "--count", line, "3"),
        ))  # fmt: skip
    return tuple(runs)


# The commit of Triton's main branch that moved initializer_as_input's test under qa/.
_INITIALIZER_REF = "ab68625682b5093289b9ba7a22d29c9e9ce2fb41"
_INITIALIZER_MODEL = "models/add_with_initializer"

# L0_infer's subset (module docstring): the backends Thaw serves, without the ensembles.
_INFER_BACKENDS = ("onnx", "libtorch", "python")
_INFER_ENV = (
    ("BACKENDS", " ".join(_INFER_BACKENDS)),
    ("ENSEMBLES", "0"),
    ("TRITON_SERVER_CPU_ONLY", "1"),
)

BACKEND_SUITES = (
    Suite(
        "L0_infer_reshape",
        ("infer_reshape_test.py",),
        {"models": build_infer_reshape_repo},
        (Run("infer_reshape_test", "models"),),
    ),
    Suite(
        "L0_libtorch_io_names",
        ("io_names_client.py",),
        {"models": build_io_names_repo},
        (Run("io_names_client", "models"),),
    ),
    Suite(
        "L0_libtorch_io_types",
        (),
        {f"models_{case}": partial(build_invalid_types_repo, case=case) for case in _INVALID_TYPES},
        tuple(
            Run(f"{case} datatype refused", f"models_{case}", refusal=text)
            for case, text in _INVALID_TYPES.items()
        ),
    ),
    Suite(
        "L0_libtorch_shared_weights",
        ("libtorch_shared_weights_test.py",),
        {
            _repo_name(kind, shared): partial(build_shared_weights_repo, kind=kind, shared=shared)
            for kind, shared, _ in _SHARED_WEIGHTS
        },
        _shared_weights_runs(),
    ),
    Suite(
        "L0_libtorch_inference_mode",
        (),
        {
            f"models_{flag}": partial(build_flag_repo, key="INFERENCE_MODE", flag=flag)
            for flag in ("true", "false")
        },
        _flag_runs("INFERENCE_MODE", "Inference Mode is", on_when="true"),
        beside=("qa/common/libtorch_infer_client.py",),
    ),
    Suite(
        "L0_libtorch_optimized_execution",
        (),
        {
            f"models_{flag}": partial(
                build_flag_repo, key="DISABLE_OPTIMIZED_EXECUTION", flag=flag
            )
            for flag in ("true", "false")
        },
        _flag_runs("DISABLE_OPTIMIZED_EXECUTION", "Optimized execution is", on_when="false"),
        beside=("qa/common/libtorch_infer_client.py",),
    ),
    Suite(
        "L0_initializer_as_input",
        ("test.py", f"{_INITIALIZER_MODEL}/config.pbtxt", f"{_INITIALIZER_MODEL}/1/model.onnx"),
        {},
        (Run("test", "models"),),
        files_ref=_INITIALIZER_REF,
    ),
    Suite(
        "L0_infer_variable",
        ("infer_variable_test.py",),
        {
            f"models_{target}": partial(build_infer_variable_repo, kind=kind)
            for target, kind in (("cpu", "KIND_CPU"), ("gpu", "KIND_GPU"))
        },
        tuple(
            Run(
                "infer_variable_test",
                f"models_{target}",
                ("--exit-timeout-secs=120",),
                label=target,
            )
            for target in ("cpu", "gpu")
        ),
    ),
    Suite(
        "L0_infer",
        ("infer_test.py",),
        {"models": partial(build_infer_repo, backends=_INFER_BACKENDS, kind="KIND_CPU")},
        (Run("infer_test", "models", ("--exit-timeout-secs=120",), env=_INFER_ENV, label="cpu"),),
    ),
    Suite(
        "L0_batch_input",
        ("batch_input_test.py",),
        {f"models_{b}": partial(build_batch_input_repo, backend=b) for b in ("onnx", "libtorch")},
        tuple(
            Run("batch_input_test", f"models_{b}", ("--exit-timeout-secs=120",), label=b)
            for b in ("onnx", "libtorch")
        ),
    ),
)
