"""Run more of Triton's own QA suites, unchanged, against `thaw serve` (or, with `--server up`,
through `thaw up`, every model at zero); report each test.

    .venv/bin/python -m tests.conformance.triton_qa [--mirror GIT_DIR] [--ref v2.51.0]
        [--suites L0_input_validation L0_parameters ...] [--server serve|up]

As tests/conformance/triton_l0_http.py does for L0_http: Triton's test files (and the model
files their directories hold) are read at run time from a local git mirror of
triton-inference-server/server (`--mirror`, default `$TRITON_SERVER_MIRROR`) into a temporary
directory, never kept in this project, and the run is skipped (exit 0) without a mirror. Each
suite's models are built as its test.sh builds them (tests/fixtures/triton_qa_suite_repos.py),
`thaw serve` (or `thaw up`: tests/conformance/qa_servers.py) starts on Triton's ports (8000 HTTP,
8001 gRPC: the tests hard-code them, so runs go one after another) with the flags test.sh gives
tritonserver, and the tests run under plain
unittest (tests/conformance/unittest_json.py). A script test.sh runs as a client
(`nullchar_string_client.py -m MODEL`) is one row, passed when it exits 0.

Suites whose models Triton's data directory holds get them from Triton's own
qa/common/gen_qa_*.py, run at the mirror's ref (tests/fixtures/triton_qa_gen.py):
tests/conformance/qa_gen_suites.py (L0_client_nobatch, L0_decoupled, L0_batcher) and
tests/conformance/qa_sequence_suites.py (L0_sequence_batcher, L0_implicit_state,
L0_dyna_sequence_batcher: one server start per test and repository, as their test.sh);
L0_model_config (tests/conformance/qa_model_config_suite.py) reads its case directories from
the mirror when it runs: one server start and one row per test.sh case;
tests/conformance/qa_l0_lifecycle.py runs L0_lifecycle's server starts whose models Thaw serves;
tests/conformance/qa_model_update.py runs L0_model_update's three starts, one per rate-limit mode;
tests/conformance/qa_namespacing.py runs L0_model_namespacing: two repositories with
`--model-namespacing=true`, one server start per test and control mode, as its test.sh.
tests/conformance/qa_more_suites.py runs ten more suites of inference semantics (L0_nan_inf,
L0_output_name, L0_scalar_io, L0_output_validation, L0_optional_input, L0_simple_ensemble,
L0_client_timeout, L0_server_status, L0_request_cancellation, L0_model_queue).
tests/conformance/qa_sched_suites.py runs seven of metrics, scheduling and sequences
(L0_metrics, L0_rate_limiter, L0_sequence_corrid_batcher, L0_iterative_sequence,
L0_dyna_implicit_state, L0_sequence_stress, L0_grpc_state_cleanup).

Tests that need what Thaw does not serve here (TensorFlow / TensorRT models, tracing) are
deselected with their reason printed; docs/triton-qa-parity.md lists
the results and the deliberate differences. Exit status: 0 when every selected test passed (or
no mirror), 1 otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from functools import partial
from pathlib import Path

from tests.conformance.pytest_junit import run_pytest
from tests.conformance.qa_backend_python import BACKEND_PYTHON_SUITES
from tests.conformance.qa_backend_python_main import PYTHON_TEST_SUITE
from tests.conformance.qa_backend_python_more import MORE_BACKEND_PYTHON_SUITES
from tests.conformance.qa_backend_suites import BACKEND_SUITES
from tests.conformance.qa_checkout import (
    Result,
    extract,
    git_show,
    have_mirror,
    mirror_parser,
    print_results,
    run_unittest,
)
from tests.conformance.qa_gen_suites import GEN_SUITES
from tests.conformance.qa_l0_lifecycle import L0_LIFECYCLE
from tests.conformance.qa_lifecycle_suites import LIFECYCLE_SUITES
from tests.conformance.qa_model_config_suite import MODEL_CONFIG_SUITE
from tests.conformance.qa_model_update import L0_MODEL_UPDATE
from tests.conformance.qa_more_suites import MORE_SUITES
from tests.conformance.qa_namespacing import NAMESPACING_SUITES
from tests.conformance.qa_sched_suites import SCHED_SUITES
from tests.conformance.qa_sequence_suites import SEQUENCE_SUITES
from tests.conformance.qa_servers import KINDS, refusal, start, unsupported
from tests.conformance.qa_suite import Run, Suite, SuiteRun
from tests.conformance.qa_trace_logging import TRACE_LOGGING_SUITES
from tests.fixtures.triton_qa_models import build_aio_repo
from tests.fixtures.triton_qa_suite_repos import (
    Mirror,
    build_grpc_repo,
    build_infer_zero_repo,
    build_input_validation_repo,
    build_large_payload_repo,
    build_nullchar_repo,
    build_parameters_repo,
    build_string_io_repo,
)

_COMMON = ("qa/common/test_util.py", "qa/common/infer_util.py", "qa/common/shm_util.py")


def _headers_runs() -> tuple[Run, ...]:
    """test.sh runs parameters_test.py once per TEST_HEADER, with its header-forward flags."""
    flags = {
        "test_params": (),
        "test_headers": (
            "--grpc-header-forward-pattern", "my_header.*",
            "--http-header-forward-pattern", "my_header.*",
        ),
        "test_header_forward_pattern_case_insensitive": (
            "--grpc-header-forward-pattern", "MY_HEADER.*",
            "--http-header-forward-pattern", "MY_HEADER.*",
        ),
        "test_grpc_header_forward_pattern_case_sensitive": (
            "--grpc-header-forward-pattern", "(?-i)MY_HEADER.*",
        ),
    }  # fmt: skip
    return tuple(
        Run("parameters_test", "model_repository", args, (("TEST_HEADER", name),), label=name)
        for name, args in flags.items()
    )


def _nullchar_runs() -> tuple[Run, ...]:
    runs = []
    for model in ("graphdef_nobatch_zero_1_object", "savedmodel_nobatch_zero_1_object"):
        for proto in ((), ("-i", "grpc", "-u", "localhost:8001")):
            label = f"{model} {'grpc' if proto else 'http'}"
            runs.append(
                Run("nullchar_string_client", "models", label=label,
                    script_args=("-m", model, *proto, "-v"))
            )  # fmt: skip
    return tuple(runs)


# The targets of L0_large_payload's test.sh Thaw serves (graphdef, savedmodel, plan: no).
_LARGE_TARGETS = ("onnx", "libtorch", "python")
# Triton 2.51 has no HTTP body cap; Thaw's default (64 MiB) would refuse the 1.9 GiB request
# the test expects to pass, so it runs with room for that and not for its 3 GiB one.
_LARGE_LIMITS = ("--max-body-bytes", str(5 << 29), "--grpc-max-message-bytes", str((1 << 31) - 1))
LARGE = (
    "builds 3 GiB + 1.9 GiB of request in the client (and as much again in the server): "
    "--with-large runs it"
)


def _large_repo(repo: Path, mirror: Mirror, *, target: str) -> Path:
    return build_large_payload_repo(repo, mirror, target)


SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite(
            "L0_input_validation",
            ("input_validation_test.py",),
            {"models": build_input_validation_repo},
            (
                Run("input_validation_test.InputValTest", "models"),
                Run("input_validation_test.InputShapeTest", "models"),
            ),
            deselect=(
                (
                    "test_wrong_input_shape_tensor_size",
                    "its models are TensorRT shape-tensor plans (no TensorRT without a GPU here)",
                ),
            ),
        ),
        Suite(
            "L0_parameters",
            ("parameters_test.py",),
            {"model_repository": build_parameters_repo},
            _headers_runs(),
        ),
        Suite(
            "L0_grpc",
            ("python_grpc_aio_test.py", "python_unit_test.py"),
            {"models": lambda repo, _m: build_grpc_repo(repo)},
            (
                Run("python_grpc_aio_test", "models"),
                Run(
                    "unknown restricted protocol",
                    "models",
                    (
                        "--grpc-restricted-protocol=model-reposit,health:k1=v1",
                        "--grpc-restricted-protocol=metadata,health:k2=v2",
                    ),
                    refusal="unknown restricted protocol 'model-reposit'",
                ),
                Run(
                    "python_unit_test.RestrictedProtocolTest",
                    "models",
                    (
                        "--grpc-restricted-protocol=model-repository:admin-key=admin-value",
                        "--grpc-restricted-protocol=inference,health:infer-key=infer-value",
                    ),
                ),
            ),
        ),
        Suite(
            # The rest of L0_http is tests/conformance/triton_l0_http.py's.
            "L0_http",
            ("http_restricted_api_test.py",),
            {"models": lambda repo, _m: build_aio_repo(repo)},
            (
                Run(
                    "repeated restricted api",
                    "models",
                    (
                        "--http-restricted-api=model-repository,health:k1=v1",
                        "--http-restricted-api=metadata,health:k2=v2",
                    ),
                    refusal="api 'health' can not be specified in multiple config groups",
                ),
                Run(
                    "unknown restricted api",
                    "models",
                    (
                        "--http-restricted-api=model-reposit,health:k1=v1",
                        "--http-restricted-api=metadata,health:k2=v2",
                    ),
                    refusal="unknown restricted api 'model-reposit'",
                ),
                Run(
                    "http_restricted_api_test.RestrictedAPITest",
                    "models",
                    (
                        "--http-restricted-api=model-repository:admin-key=admin-value",
                        "--http-restricted-api=inference,metadata:infer-key=infer-value",
                    ),
                ),
            ),
        ),
        Suite(
            "L0_infer_zero",
            ("infer_zero_test.py",),
            {"models": lambda repo, _m: build_infer_zero_repo(repo)},
            # The test's own switch for the backends a server has (TensorFlow: none here).
            (Run("infer_zero_test", "models", env=(("BACKENDS", "onnx libtorch"),)),),
        ),
        Suite(
            "L0_large_payload",
            ("large_payload_test.py",),
            {f"models_{target}": partial(_large_repo, target=target) for target in _LARGE_TARGETS},
            tuple(
                Run(
                    f"large_payload_test.LargePayLoadTest.test_{target}",
                    f"models_{target}",
                    ("--log-verbose=1", *_LARGE_LIMITS),
                )
                for target in _LARGE_TARGETS
            ),
            large=True,
        ),
        Suite(
            "L0_string_io",
            ("string_client_test.py",),
            {"models": build_string_io_repo},
            (Run("string_client_test", "models"),),
        ),
        Suite(
            "L0_nullchar_string",
            ("nullchar_string_client.py",),
            {"models": lambda repo, _m: build_nullchar_repo(repo)},
            _nullchar_runs(),
        ),
        PYTHON_TEST_SUITE,
        *BACKEND_PYTHON_SUITES,
        *MORE_BACKEND_PYTHON_SUITES,
        *TRACE_LOGGING_SUITES,
        *GEN_SUITES,
        *LIFECYCLE_SUITES,
        *SEQUENCE_SUITES,
        MODEL_CONFIG_SUITE,
        L0_LIFECYCLE,
        L0_MODEL_UPDATE,
        *NAMESPACING_SUITES,
        *MORE_SUITES,
        *BACKEND_SUITES,
        *SCHED_SUITES,
    )
}


def deselected(test_id: str, suite: Suite, *, with_large: bool = False) -> str | None:
    """The reason `test_id` is not run, or None when it is selected."""
    if suite.large and not with_large:
        return LARGE
    for needle, reason in suite.deselect:
        # A needle ending in `$` matches the end of the id only (a test whose name begins
        # another's: test_decoupled_bls, test_decoupled_bls_stream).
        if test_id.endswith(needle[:-1]) if needle.endswith("$") else needle in test_id:
            return reason
    return None


def select(
    test_ids: Iterable[str], suite: Suite, *, with_large: bool = False
) -> tuple[list[str], dict[str, str]]:
    """Split listed test ids into the selected and {deselected: reason}."""
    selected: list[str] = []
    dropped: dict[str, str] = {}
    for test_id in test_ids:
        reason = deselected(test_id, suite, with_large=with_large)
        if reason is None:
            selected.append(test_id)
        else:
            dropped[test_id] = reason
    return selected, dropped


def rows_to_results(ref: str, run: Run, rows: dict[str, dict[str, str]]) -> list[Result]:
    """unittest_json's rows as report rows: the test's own name, the run's label before it."""
    results = []
    for test_id, row in rows.items():
        name = test_id.rsplit(".", 1)[-1]
        if run.label:
            name = f"{name} [{run.label}]"
        detail = " ".join(row["detail"].split())[:240]
        results.append(Result(ref, run.file, name, row["outcome"], detail))
    return results


_SCRIPT_TIMEOUT_S = 600.0


def _script(qa_dir: Path, run: Run, env: dict[str, str]) -> dict[str, dict[str, str]]:
    """`run.file` run as test.sh runs it, a script with its arguments (and the run's `env`,
    the server's pid among them when the test signals it). One that runs past _SCRIPT_TIMEOUT_S
    is a failed row (killed), not the end of the whole run and every other suite's rows."""
    try:
        proc = subprocess.run(
            [sys.executable, run.file, *(run.script_args or ())],
            cwd=qa_dir, capture_output=True, text=True, check=False, timeout=_SCRIPT_TIMEOUT_S,
            env={**os.environ, **env},
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        detail = f"timed out after {_SCRIPT_TIMEOUT_S:.0f} s (killed)"
        return {run.target: {"outcome": "failed", "detail": detail}}
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [""]
    outcome = "passed" if proc.returncode == 0 else "failed"
    return {run.target: {"outcome": outcome, "detail": "" if outcome == "passed" else tail[0]}}


# tritonserver's --exit-on-error is true by default, Thaw's false (a model that fails to load
# leaves the others served): test.sh's starts expected refused rely on Triton's default, so
# unless a run chooses, it is given, as tritonserver's command line means it.
_EXIT_ON_ERROR = "--exit-on-error=true"


def _refused(ref: str, qa_dir: Path, run: Run, kind: str) -> list[Result]:
    """test.sh's check that the server does not start, and its log says why."""
    args = run.serve_args
    if not any(arg.startswith("--exit-on-error") for arg in args):
        args = (*args, _EXIT_ON_ERROR)
    started, log = refusal(kind, qa_dir / run.repo, args)
    if started:
        outcome, detail = "failed", f"thaw {kind} started"
    else:
        found = run.refusal in log
        outcome = "passed" if found else "failed"
        detail = "" if found else f"log lacks {run.refusal!r}: {log[-200:]}"
    return [Result(ref, "test.sh", run.target, outcome, " ".join(detail.split()))]


def _run_one(
    ref: str, qa_dir: Path, suite: Suite, run: Run, *, with_large: bool, kind: str
) -> list[Result]:
    run = run.at(qa_dir)
    if run.refusal:
        return _refused(ref, qa_dir, run, kind)
    env = dict(run.env)
    if run.link:  # before the listing: a test may import from it (`models.<model>.util`)
        (qa_dir / run.link).unlink(missing_ok=True)
        (qa_dir / run.link).symlink_to(qa_dir / run.repo, target_is_directory=True)
    if run.script_args is None and not run.pytest:
        listing = run_unittest(qa_dir, "--list", run.target, env=env)
        if listing.returncode != 0:
            raise SystemExit(f"cannot load {ref}:{suite.name}/{run.target}:\n{listing.stderr}")
        selected, dropped = select(listing.stdout.split(), suite, with_large=with_large)
    else:
        selected, dropped = [run.target], {}
    results = rows_to_results(
        ref, run, {t: {"outcome": "deselected", "detail": r} for t, r in dropped.items()}
    )
    if not selected:
        return results
    flag = unsupported(kind, run.serve_args)
    if flag is not None:  # a difference between the targets, reported as such
        rows = {t: {"outcome": "error", "detail": f"thaw {kind} has no {flag}"} for t in selected}
        return results + rows_to_results(ref, run, rows)
    try:
        server = start(
            kind, qa_dir / run.repo, run.serve_args, ready=run.ready, env=dict(run.server_env)
        )
    except RuntimeError as exc:  # the server refused the flags or never became ready
        last = str(exc).strip().splitlines()[-1][:200]
        rows = {t: {"outcome": "error", "detail": f"thaw {kind} did not start: {last}"}
                for t in selected}  # fmt: skip
        return results + rows_to_results(ref, run, rows)
    if run.pass_pid:
        env["SERVER_PID"] = str(server.proc.pid)
    if run.server_log:  # the tests read it by test.sh's name, in their own directory
        (qa_dir / run.server_log).unlink(missing_ok=True)
        (qa_dir / run.server_log).symlink_to(server.log_path)
    try:
        if run.script_args is not None:
            rows = _script(qa_dir, run, env)
        elif run.pytest:
            rows = run_pytest(qa_dir, run.file, env)
        else:
            report = qa_dir / f"{run.target}.{run.label or 'all'}.json"
            proc = run_unittest(qa_dir, "--out", str(report), *selected, env=env)
            if not report.is_file():
                raise SystemExit(f"{ref}:{run.target} did not report:\n{proc.stderr[-4000:]}")
            rows = json.loads(report.read_text())
    finally:
        rc = server.stop()
        if rc != 0:
            print(f"warning: thaw {kind} exited {rc}; log: {server.log_path}", file=sys.stderr)
    results += rows_to_results(ref, run, rows)
    if run.log_expects:
        found = run.log_expects in server.log_path.read_text(errors="replace")
        detail = "" if found else f"the server's log lacks {run.log_expects!r}"
        row = f"{run.label or run.target}: log has {run.log_expects!r}"
        results.append(Result(ref, "test.sh", row, "passed" if found else "failed", detail))
    return results


def apply_edits(qa_dir: Path, edits: tuple[tuple[str, str, str], ...]) -> None:
    """A suite's `edits` made in its extracted files; SystemExit when a text to change is gone
    (the test changed at that ref: the edit must be looked at again)."""
    for file, old, new in edits:
        path = qa_dir / file
        text = path.read_text()
        if old not in text:
            raise SystemExit(f"{path} has no {old!r} to change")
        path.write_text(text.replace(old, new))


def run_suites(
    mirror: Path, ref: str, names: list[str], *, with_large: bool, kind: str = "serve"
) -> list[Result]:
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="thaw-triton-qa-") as tmp:
        base = Path(tmp)

        def read(path: str) -> bytes:
            content = git_show(mirror, ref, path)
            if content is None:
                raise SystemExit(f"{ref}:{path} is not in {mirror}")
            return content

        extract(mirror, ref, _COMMON, base)
        for name in names:
            suite = SUITES[name]
            files = [f"qa/{name}/{f}" for f in suite.files]
            extract(mirror, suite.files_ref or ref, files, base)
            qa_dir = base / "qa" / name
            qa_dir.mkdir(parents=True, exist_ok=True)  # a suite may have no files of its own
            apply_edits(qa_dir, suite.edits)
            for path in suite.beside:
                (qa_dir / Path(path).name).write_bytes(read(path))
            for repo_name, build in suite.repos.items():
                build(qa_dir / repo_name, Mirror(read))
            label = ref if kind == "serve" else f"{ref} (thaw up)"
            if suite.runner is not None:
                results += suite.runner(SuiteRun(mirror, ref, qa_dir, kind, label))
            for run in suite.runs:
                results += _run_one(label, qa_dir, suite, run, with_large=with_large, kind=kind)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = mirror_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--ref", default="v2.51.0")
    parser.add_argument("--suites", nargs="+", default=list(SUITES), choices=list(SUITES))
    parser.add_argument("--with-large", action="store_true", help="also run L0_large_payload")
    parser.add_argument(
        "--server", choices=KINDS, default="serve",
        help="run against `thaw serve` (default) or through `thaw up`, models at zero",
    )  # fmt: skip
    args = parser.parse_args(argv)
    mirror: Path = args.mirror
    if not have_mirror(mirror, args.ref, _COMMON[0]):
        return 0
    results = run_suites(
        mirror, args.ref, args.suites, with_large=args.with_large, kind=args.server
    )
    print_results(results)
    return 1 if any(r.outcome in ("failed", "error") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
