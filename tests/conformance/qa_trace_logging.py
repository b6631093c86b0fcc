"""Triton's qa/L0_logging and qa/L0_trace, the endpoint tests of the logging and trace
extensions, as suites of tests.conformance.triton_qa (thawserver.settings_api).

    L0_logging  logging_endpoint_test.py against a default server (test.sh's last run of it),
                and log_format_test.py, which starts `tritonserver` itself (12 starts, each
                test's flags) and parses every record of its log file in both of Triton's
                formats, escaped and not (TRITON_SERVER_ESCAPE_LOG_MESSAGES): `tritonserver`
                is a shim on its PATH that runs `thaw serve` (or `thaw up` on Triton's ports)
    L0_trace    trace_endpoint_test.py with test.sh's flags for it: `--trace-config
                triton,file=global_unittest.log --trace-config level=TIMESTAMPS
                --trace-config rate=1`

Their model is `simple` (test.sh copies onnx_int32_int32_int32 from Triton's data directory; the
tests only name it, so the INT32 add/sub Python model of L0_http's repository stands in).
Left out, not in these suites: L0_trace's `opentelemetry_unittest.py` (an
OpenTelemetry collector; Thaw has the `triton` trace mode only) and test.sh's checks of the
trace files' contents (the records are checked beside real Triton's instead:
docs/triton-http-parity.md), and L0_logging test.sh's counts of log lines.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from tests.conformance.pytest_junit import run_pytest
from tests.conformance.qa_checkout import Result, port_in_use
from tests.conformance.qa_servers import PORTS
from tests.conformance.qa_suite import Run, Suite, SuiteRun
from tests.fixtures.triton_qa_models import build_aio_repo
from tests.fixtures.triton_qa_suite_repos import Mirror

__all__ = ["TRACE_LOGGING_SUITES"]

_TRACE_FLAGS = (
    "--trace-config", "triton,file=global_unittest.log",
    "--trace-config", "level=TIMESTAMPS",
    "--trace-config", "rate=1",
)  # fmt: skip


def build_simple_repo(repo: Path, _mirror: Mirror) -> Path:
    """A repository of one model, `simple` (INT32 add/sub, L0_http's)."""
    with tempfile.TemporaryDirectory(prefix="thaw-simple-") as tmp:
        built = build_aio_repo(Path(tmp) / "models")
        repo.mkdir(parents=True, exist_ok=True)
        shutil.copytree(built / "simple", repo / "simple")
    return repo


# `thaw up` on Triton's ports as the conformance runner starts it (tests.conformance.qa_servers).
_UP_FLAGS = f"--port {PORTS[0]} --warm-pool 1 --no-image-build"


def _shim(directory: Path, kind: str) -> Path:
    """A `tritonserver` that runs `thaw <kind>` with the flags it is given."""
    directory.mkdir(parents=True, exist_ok=True)
    shim = directory / "tritonserver"
    flags = _UP_FLAGS if kind == "up" else ""
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m thaw.cli {kind} {flags} "$@"\n')
    shim.chmod(0o755)
    return directory


def _run_log_format(run: SuiteRun) -> list[Result]:
    """log_format_test.py as test.sh runs it, `tritonserver` on its PATH being Thaw's."""
    busy = [port for port in PORTS if port_in_use(port)]
    if busy:
        raise SystemExit(f"port(s) {busy} in use; Triton's tests need them (run under unshare -n)")
    bin_dir = _shim(run.qa_dir / "shim-bin", run.kind)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    rows = run_pytest(run.qa_dir, "log_format_test.py", env)
    return [
        Result(run.label, "log_format_test.py", test_id.rsplit(".", 1)[-1], row["outcome"],
               " ".join(row["detail"].split())[:600])
        for test_id, row in rows.items()
    ]  # fmt: skip


TRACE_LOGGING_SUITES = (
    Suite(
        "L0_logging",
        ("logging_endpoint_test.py", "log_format_test.py"),
        {"log_models": build_simple_repo},
        (Run("logging_endpoint_test", "log_models"),),
        runner=_run_log_format,
    ),
    Suite(
        "L0_trace",
        ("trace_endpoint_test.py",),
        {"trace_models": build_simple_repo},
        (Run("trace_endpoint_test", "trace_models", _TRACE_FLAGS),),
    ),
)
