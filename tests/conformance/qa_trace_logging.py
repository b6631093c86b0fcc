"""Triton's qa/L0_logging and qa/L0_trace, the endpoint tests of the logging and trace
extensions, as suites of tests.conformance.triton_qa (thawserver.settings_api).

    L0_logging  logging_endpoint_test.py against a default server (test.sh's last run of it)
    L0_trace    trace_endpoint_test.py with test.sh's flags for it: `--trace-config
                triton,file=global_unittest.log --trace-config level=TIMESTAMPS
                --trace-config rate=1`

Their model is `simple` (test.sh copies onnx_int32_int32_int32 from Triton's data directory; the
tests only name it, so the INT32 add/sub Python model of L0_http's repository stands in).
Left out, not in these suites: L0_logging's `log_format_test.py` (it starts `tritonserver`
itself and parses Triton's C++ log records), L0_trace's `opentelemetry_unittest.py` (an
OpenTelemetry collector; Thaw has the `triton` trace mode only) and test.sh's checks of the
trace files' contents (Thaw keeps trace settings but writes no trace records yet:
docs/triton-qa-parity.md).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from tests.conformance.qa_suite import Run, Suite
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


TRACE_LOGGING_SUITES = (
    Suite(
        "L0_logging",
        ("logging_endpoint_test.py",),
        {"log_models": build_simple_repo},
        (Run("logging_endpoint_test", "log_models"),),
    ),
    Suite(
        "L0_trace",
        ("trace_endpoint_test.py",),
        {"trace_models": build_simple_repo},
        (Run("trace_endpoint_test", "trace_models", _TRACE_FLAGS),),
    ),
)
