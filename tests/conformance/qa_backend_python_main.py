"""Triton's qa/L0_backend_python/test.sh itself (not its subtests' suites,
tests/conformance/qa_backend_python.py), with test.sh's flags (`--log-verbose=1`; no
`--backend-directory`: Thaw's Python backend needs none):

    python_test.py     its first server start (`--backend-config=python,shm-default-byte-size=
                       5242880`) on the models tests/fixtures/triton_qa_backend_python_main.py
                       builds; the model `init_args` checks its `model_repository` against
                       `$TRITON_DIR/qa/L0_backend_python/models/init_args`, so the server gets
                       TRITON_DIR as test.sh's environment has it
    non-graceful exit  a second start on the same models, SIGKILLed: none of its processes
                       (stubs; under `thaw up` its replicas too) may outlive it 10 s later
    multi_file         the server starts with a model made of several .py files
    model_env          the server starts with `MY_ENV` in its environment (the model checks it)
    init_exit          a model whose `initialize` exits: the start is refused, its log saying
                       "Stub process 'init_exit_0_0' is not healthy."

Not run: the shared-memory region size check (it reads /dev/shm/triton_python_backend_shm*,
regions Thaw's stubs do not make: tensors go through memfds) and the `KIND_GPU` start (GPU).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable

import psutil

from tests.conformance.qa_checkout import Result
from tests.conformance.qa_servers import start
from tests.conformance.qa_suite import Run, Suite, SuiteRun
from tests.fixtures.triton_qa_backend_python_main import (
    build_init_exit_repo,
    build_model_env_repo,
    build_multi_file_repo,
    build_python_test_repo,
)

__all__ = ["PYTHON_TEST_SUITE", "outlived"]

_CUDA = "CUDA shared memory and tensors on a GPU (tritonclient.utils.cuda_shared_memory)"
# The test of v2.51 sends a float32 array as its BF16 input, which the tritonclient installed
# here (2.73; since r26.06) refuses in the client, before any request is sent.
_CLIENT_BF16 = "the installed tritonclient refuses a float32 array as a BF16 input (not sent)"
_VERBOSE = ("--log-verbose", "1")
_FIRST_START = ("--backend-config", "python,shm-default-byte-size=5242880", *_VERBOSE)
_TRITON_DIR = (("TRITON_DIR", "{triton_dir}"),)
_SETTLE_S = 5.0  # test.sh's `sleep 5` after the start, before it kills the server
_GRACE_S = 10.0  # test.sh's `sleep 10` before it looks for survivors


def outlived(pids: list[int], alive: Callable[[int], bool]) -> list[int]:
    """The processes of `pids` still alive (test.sh's `kill -0` on each)."""
    return [pid for pid in pids if alive(pid)]


def _alive(pid: int) -> bool:
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _non_graceful(run: SuiteRun) -> Result:
    """Start, wait, SIGKILL the server: no process it started (any depth) may survive it."""
    env = {"TRITON_DIR": str(run.qa_dir.parent.parent)}
    server = start(run.kind, run.qa_dir / "models", _FIRST_START, env=env)
    time.sleep(_SETTLE_S)
    children = [child.pid for child in psutil.Process(server.proc.pid).children(recursive=True)]
    os.kill(server.proc.pid, signal.SIGKILL)
    server.stop()  # reaps it, closes its log
    deadline = time.monotonic() + _GRACE_S
    left = outlived(children, _alive)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = outlived(children, _alive)
    for pid in left:  # never leave them holding Triton's ports for the next run
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    detail = f"{len(left)} of {len(children)} processes outlived it: {left}" if left else ""
    outcome = "passed" if children and not left else "failed"
    if not children:
        detail = f"thaw {run.kind} had no child process to check"
    return Result(
        run.label,
        "test.sh",
        "non-graceful exit: no process outlives a SIGKILLed server",
        outcome,
        detail,
    )


def _starts(run: SuiteRun, test: str, repo: str, env: dict[str, str]) -> Result:
    """test.sh's `run_server` check: the server starts (and is ready)."""
    try:
        server = start(run.kind, run.qa_dir / repo, _VERBOSE, env=env)
    except RuntimeError as exc:
        last = str(exc).strip().splitlines()[-1][:200]
        return Result(run.label, "test.sh", test, "failed", f"did not start: {last}")
    rc = server.stop()
    detail = "" if rc == 0 else f"exited {rc} when stopped; log: {server.log_path}"
    return Result(run.label, "test.sh", test, "passed" if rc == 0 else "failed", detail)


def _later_starts(run: SuiteRun) -> list[Result]:
    """test.sh's starts after python_test.py's (init_exit's refusal is a Run of its own)."""
    return [
        _non_graceful(run),
        _starts(run, "multi_file: the server starts", "models_multi_file", {}),
        _starts(run, "model_env: the server starts", "models_model_env", {"MY_ENV": "MY_ENV"}),
    ]


PYTHON_TEST_SUITE = Suite(
    "L0_backend_python",
    ("python_test.py",),
    {
        "models": build_python_test_repo,
        "models_multi_file": build_multi_file_repo,
        "models_model_env": build_model_env_repo,
        "models_init_exit": build_init_exit_repo,
    },
    (
        Run(
            "python_test",
            "models",
            _FIRST_START,
            server_env=_TRITON_DIR,
            server_log="inference_server.log",
        ),
        Run(
            "init_exit: the start is refused",
            "models_init_exit",
            _VERBOSE,
            refusal="Stub process 'init_exit_0_0' is not healthy.",
        ),
    ),
    deselect=(
        ("test_gpu_tensor_error", _CUDA),
        ("test_dlpack_tensor_error", _CUDA),
        ("test_bf16", _CLIENT_BF16),
    ),
    runner=_later_starts,
)
