"""Triton's qa/L0_cmdline_trace, its own test.sh, against `thaw serve`: eleven starts with the
trace flags on the command line (`--trace-file`, `--trace-level` OFF / MIN / MAX / TIMESTAMPS /
TENSORS, `--trace-rate` 1, 6, 9, `--trace-log-frequency` 2), 20 requests each (or one through a
nested ensemble), each trace file summarized by Triton's qa/common/trace_summary.py and counted
(traces kept by the rate, files rotated by the frequency, an ensemble's nine traces with their
ids and parents, its tensors), then the deprecation warning of each old trace flag.

    unshare -n sh -c 'ip link set lo up && \
        .venv/bin/python -m tests.conformance.triton_l0_cmdline_trace'

test.sh, trace_client.py, qa/common/util.sh (its `run_server`) and qa/common/trace_summary.py
are read from the server mirror (`--mirror`, default `$TRITON_SERVER_MIRROR`; without one the
run says so and exits 0) and run by bash unchanged but for `EDITS`: `SERVER` is a two-line shim
that runs `thaw serve` with the flags test.sh gives, and `DATADIR` a directory holding what
test.sh copies: `onnx_int32_int32_int32` (qa_model_repository) and `fan_onnx_int32_int32_int32`
with its step `nop_TYPE_INT32_-1` (qa_ensemble_model_repository), made by Triton's
qa/common/gen_qa_models.py (tests/fixtures/triton_qa_gen.py); the nop model, of Triton's C++
`identity` backend, is a Python model answering each INPUTn as OUTPUTn. Left out: test.sh's
last part, after its deprecation checks, which starts `--trace-config mode=opentelemetry` with
bad OpenTelemetry batch settings (Thaw has the `triton` trace mode only: such a start is
refused, not for the bad settings). It uses Triton's ports: run it in a network namespace of
its own, as above.

Exit status: test.sh's (0 when it says "Test Passed").
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conformance.qa_test_sh import run_test_sh
from tests.conformance.triton_qa import apply_edits
from tests.fixtures.triton_qa_gen import copy_models
from tests.fixtures.triton_qa_suite_repos import Mirror

__all__ = ["EDITS", "main"]

SUITE = "qa/L0_cmdline_trace"
FILES = ("test.sh", "trace_client.py")
MODEL = "onnx_int32_int32_int32"
NOP = "nop_TYPE_INT32_-1"
TIMEOUT_S = 1200

# Triton's C++ `identity` backend as its nop models use it: each INPUTn answered as OUTPUTn.
_NOP_PY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = [
                pb_utils.Tensor("OUTPUT" + tensor.name()[len("INPUT"):], tensor.as_numpy())
                for tensor in request.inputs()
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

# test.sh's part from here on starts OpenTelemetry mode (left out, module docstring); its end
# (the summary and exit) is kept.
_OTEL_PART = "\nset +e\n\n#####"
_SUMMARY = """
if [ $RET -eq 0 ]; then
    echo -e "\\n***\\n*** Test Passed\\n***"
else
    echo -e "\\n***\\n*** Test FAILED\\n***"
fi

exit $RET
"""

# (file, text, replacement): what differs from Triton's run, each a stand-in named above.
EDITS: tuple[tuple[str, str, str], ...] = (
    ("test.sh", "SERVER=/opt/tritonserver/bin/tritonserver", "SERVER=$THAW_SERVER_SHIM"),
    # Its `#!/usr/bin/python` is not on every machine: run by this Python (first on PATH).
    (
        "test.sh",
        "TRACE_SUMMARY=../common/trace_summary.py",
        'TRACE_SUMMARY="python3 ../common/trace_summary.py"',
    ),
    (
        "test.sh",
        "DATADIR=/data/inferenceserver/${REPO_VERSION}/qa_model_repository",
        "DATADIR=$THAW_DATADIR/qa_model_repository",
    ),
)


def _prepare(mirror: Mirror, work: Path) -> Path:
    """The suite's directory under `work/qa`, edited, beside qa/common's two files."""
    suite = work / "qa" / "L0_cmdline_trace"
    suite.mkdir(parents=True)
    for name in ("util.sh", "trace_summary.py"):
        mirror.copy(f"qa/common/{name}", work / "qa" / "common" / name)
    for name in FILES:
        mirror.copy(f"{SUITE}/{name}", suite / name)
    apply_edits(suite, EDITS)
    script = suite / "test.sh"
    text = script.read_text()
    if _OTEL_PART not in text:
        raise SystemExit(f"{script} has no OpenTelemetry part to leave out: look at it again")
    script.write_text(text[: text.index(_OTEL_PART)] + _SUMMARY)
    return suite


def _datadir(mirror: Mirror, work: Path) -> Path:
    """Triton's data directory, as much of it as test.sh reads."""
    data = work / "data"
    copy_models(mirror, "qa_model_repository", data / "qa_model_repository", [MODEL])
    ensembles = data / "qa_ensemble_model_repository" / "qa_model_repository"
    copy_models(mirror, "qa_ensemble_model_repository", ensembles, [f"fan_{MODEL}", NOP])
    config = ensembles / NOP / "config.pbtxt"
    config.write_text(config.read_text().replace('backend: "identity"', 'backend: "python"'))
    (ensembles / NOP / "1").mkdir(parents=True, exist_ok=True)
    (ensembles / NOP / "1" / "model.py").write_text(_NOP_PY)
    return data


def _prepare_run(mirror: Mirror, work: Path) -> tuple[Path, dict[str, str]]:
    return _prepare(mirror, work), {"THAW_DATADIR": str(_datadir(mirror, work))}


def main(argv: list[str] | None = None) -> int:
    return run_test_sh(
        "L0_cmdline_trace", _prepare_run, argv, timeout_s=TIMEOUT_S, doc=__doc__ or ""
    )


if __name__ == "__main__":
    sys.exit(main())
