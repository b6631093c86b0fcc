"""Triton's qa/L0_backend_python/bls/test.sh, its parts that run on a CPU, as one suite of
tests.conformance.triton_qa (models: tests/fixtures/triton_qa_backend_python.py).

    main loop        `../test_infer_shm_leak.py` under pytest with MODEL_NAME bls_memory and
                     bls_memory_async, one server start per BLS_KIND (non_decoupled, decoupled);
                     bls and bls_async are left out (rows `deselected`): their unittests put
                     torch tensors on CUDA. test.sh's two CUDA memory pool sizes are one start
                     here (a CPU has no CUDA pool; `--cuda-memory-pool-byte-size` not given)
    bls_init_error   the server must not start; its log says BLS_ONLY_IN_EXECUTE (a Run)
    bls_finalize_error  started, stopped; its log says BLS_ONLY_IN_EXECUTE
    bls_model_loading   explicit mode: POST load, then `../test_infer_shm_leak.py`; then the
                     same model with test.sh's `model_warmup` appended: POST load
    bls_parameters   bls_parameters_test.py (a Run)

bls_model_loading's unittest opens `models/onnx_int32_int32_int32/3/model.onnx`, relative to
the server's working directory, which in test.sh is the subtest's: its server starts there.
"""

from __future__ import annotations

import contextlib
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tests.conformance.pytest_junit import run_pytest
from tests.conformance.qa_checkout import Result
from tests.conformance.qa_servers import PORTS, Server, start
from tests.conformance.qa_suite import Run, Suite, SuiteRun
from tests.fixtures.triton_qa_backend_python import (
    BLS_WARMUP,
    build_bls_finalize_error_repo,
    build_bls_init_error_repo,
    build_bls_memory_repo,
    build_bls_model_loading_repo,
    build_bls_parameters_repo,
)

__all__ = ["BLS_ONLY_IN_EXECUTE", "BLS_SUITE"]

BLS_ONLY_IN_EXECUTE = "BLS is only supported during the 'execute' function."
_VERBOSE = ("--log-verbose", "1")
_SHM_LEAK = "test_infer_shm_leak.py"
_BLS_KINDS = ("non_decoupled", "decoupled")
_CPU_MODELS = ("bls_memory", "bls_memory_async")
_GPU_MODELS = {
    "bls": "its unittest puts torch tensors on CUDA (test_gpu_bls, test_bls_tensor_lifecycle, "
    "libtorch_gpu): no GPU on this machine",
    "bls_async": "its execute sends torch tensors on CUDA (multiple_async_bls_*(gpu=True)): "
    "no GPU on this machine",
}
_PROJECT_ROOT = Path(__file__).resolve().parents[2]
_LOAD_TIMEOUT_S = 900  # bls_model_loading's initialize sleeps 30 s after each of its 3 tests


class _Rows:
    """The suite's report rows, in test.sh's order, each under the run's label."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.results: list[Result] = []

    def add(self, file: str, test: str, outcome: str, detail: str = "") -> None:
        detail = " ".join(detail.split())[:600]
        self.results.append(Result(self.label, file, test, outcome, detail))

    def pytest(self, run: SuiteRun, env: dict[str, str], tag: str) -> None:
        (run.qa_dir / "test_infer_shm_leak.junit.xml").unlink(missing_ok=True)
        for test_id, got in run_pytest(run.qa_dir, _SHM_LEAK, env).items():
            name = f"{test_id.rsplit('.', 1)[-1]} [{tag}]"
            self.add(_SHM_LEAK, name, got["outcome"], got["detail"])


def _start(
    run: SuiteRun, repo: str, args: tuple[str, ...], env: dict[str, str] | None = None
) -> Server:
    """`thaw <kind>` started in the subtest's directory (test.sh's working directory, which
    its models' relative paths assume), this checkout's packages first on its path;
    RuntimeError when it is not ready."""
    env = {**(env or {}), "PYTHONPATH": str(_PROJECT_ROOT)}
    with contextlib.chdir(run.qa_dir):
        return start(run.kind, run.qa_dir / repo, args, env=env)


def _stop(server: Server, kind: str) -> None:
    rc = server.stop()
    if rc != 0:
        print(f"warning: thaw {kind} exited {rc}; log: {server.log_path}", file=sys.stderr)


def _not_started(rows: _Rows, kind: str, exc: RuntimeError, *tests: tuple[str, str]) -> None:
    last = str(exc).strip().splitlines()[-1][:200]
    for file, test in tests:
        rows.add(file, test, "error", f"thaw {kind} did not start: {last}")


def _post_load(model: str) -> tuple[str, str]:
    """test.sh's `curl -X POST localhost:8000/v2/repository/models/MODEL/load`: passed on 200
    (test.sh fails only on 400; any other failure is a failure here too)."""
    request = urllib.request.Request(
        f"http://localhost:{PORTS[0]}/v2/repository/models/{model}/load", data=b"", method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=_LOAD_TIMEOUT_S) as resp:
            return ("passed", "") if resp.status == 200 else ("failed", f"HTTP {resp.status}")
    except urllib.error.HTTPError as exc:
        return "failed", f"HTTP {exc.code}: {exc.read()[:300]!r}"
    except OSError as exc:
        return "failed", str(exc)


def _main_loop(run: SuiteRun, rows: _Rows) -> None:
    for kind in _BLS_KINDS:
        for model, why in _GPU_MODELS.items():
            rows.add(_SHM_LEAK, f"test_shm_leak [{model} {kind}]", "deselected", why)
        try:
            server = _start(run, "models_memory", _VERBOSE, {"BLS_KIND": kind})
        except RuntimeError as exc:
            tests = [(_SHM_LEAK, f"test_shm_leak [{model} {kind}]") for model in _CPU_MODELS]
            _not_started(rows, run.kind, exc, *tests)
            continue
        try:
            for model in _CPU_MODELS:
                rows.pytest(run, {"MODEL_NAME": model}, f"{model} {kind}")
        finally:
            _stop(server, run.kind)


def _finalize_error(run: SuiteRun, rows: _Rows) -> None:
    test = "bls_finalize_error: the log says BLS is only supported during execute"
    try:
        server = _start(run, "models_finalize_error", _VERBOSE)
    except RuntimeError as exc:
        _not_started(rows, run.kind, exc, ("test.sh", test))
        return
    _stop(server, run.kind)  # test.sh's kill_server: finalize runs
    if BLS_ONLY_IN_EXECUTE in server.log_path.read_text(errors="replace"):
        rows.add("test.sh", test, "passed")
    else:
        rows.add("test.sh", test, "failed", f"not in thaw {run.kind}'s log {server.log_path}")


def _model_loading(run: SuiteRun, rows: _Rows) -> None:
    model = "bls_model_loading"
    args = ("--model-control-mode", "explicit", *_VERBOSE)
    load = f"POST /v2/repository/models/{model}/load"
    try:
        server = _start(run, "models", args)
    except RuntimeError as exc:
        shm_leak = (_SHM_LEAK, f"test_shm_leak [{model}]")
        _not_started(rows, run.kind, exc, ("test.sh", load), shm_leak)
    else:
        try:
            rows.add("test.sh", load, *_post_load(model))
            rows.pytest(run, {"MODEL_NAME": model}, model)
        finally:
            _stop(server, run.kind)
    config = run.qa_dir / "models" / model / "config.pbtxt"
    config.write_text(config.read_text() + BLS_WARMUP)
    try:
        server = _start(run, "models", args)
    except RuntimeError as exc:
        _not_started(rows, run.kind, exc, ("test.sh", f"{load} [model_warmup]"))
        return
    try:
        rows.add("test.sh", f"{load} [model_warmup]", *_post_load(model))
    finally:
        _stop(server, run.kind)


def _run_bls(run: SuiteRun) -> list[Result]:
    """test.sh's parts in its order, bls_init_error and bls_parameters aside (the suite's
    Runs, after these)."""
    rows = _Rows(run.label)
    _main_loop(run, rows)
    _finalize_error(run, rows)
    _model_loading(run, rows)
    return rows.results


BLS_SUITE = Suite(
    "L0_backend_python/bls",
    ("bls_parameters_test.py",),
    {
        "models_memory": build_bls_memory_repo,
        "models_init_error": build_bls_init_error_repo,
        "models_finalize_error": build_bls_finalize_error_repo,
        "models": build_bls_model_loading_repo,
        "params_models": build_bls_parameters_repo,
    },
    (
        Run("bls_init_error", "models_init_error", _VERBOSE, refusal=BLS_ONLY_IN_EXECUTE),
        Run("bls_parameters_test", "params_models", _VERBOSE),
    ),
    beside=("qa/L0_backend_python/test_infer_shm_leak.py",),
    runner=_run_bls,
)
