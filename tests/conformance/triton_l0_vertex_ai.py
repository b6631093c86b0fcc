"""Triton's qa/L0_vertex_ai, its own test.sh, against `thaw serve`: the Vertex AI port off by
default and on with `--allow-vertex-ai` or `AIP_MODE=PREDICTION` (which turns the HTTP port
off), a start refused without `AIP_PREDICT_ROUTE` / `AIP_HEALTH_ROUTE`, `AIP_STORAGE_URI` and
`AIP_HTTP_PORT`, the default model (refused when not loaded, or not named among several), then
vertex_ai_test.py's eight predictions (JSON, binary tensors by Content-Type, a redirect to
another model, four malformed binary headers) and a redirect to each v2 endpoint.

    unshare -n sh -c 'ip link set lo up && \
        .venv/bin/python -m tests.conformance.triton_l0_vertex_ai'

test.sh, vertex_ai_test.py, qa/common/util.sh (its `run_server`) and qa/common/test_util.py
are read from the server mirror (`--mirror`, default `$TRITON_SERVER_MIRROR`; without one the
run says so and exits 0) and run by bash unchanged but for `EDITS`: `SERVER` is a two-line
shim that runs `thaw serve` with the flags test.sh gives, and `DATADIR` a directory holding
what test.sh copies: `onnx_int32_int32_int32` (qa_model_repository), made by Triton's
qa/common/gen_qa_models.py (tests/fixtures/triton_qa_gen.py). It uses Triton's ports (8000,
8080, 5234): run it in a network namespace of its own, as above.

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

SUITE = "qa/L0_vertex_ai"
FILES = ("test.sh", "vertex_ai_test.py")
MODEL = "onnx_int32_int32_int32"
TIMEOUT_S = 900

# (file, text, replacement): what differs from Triton's run, each a stand-in named above.
EDITS: tuple[tuple[str, str, str], ...] = (
    ("test.sh", "SERVER=/opt/tritonserver/bin/tritonserver", "SERVER=$THAW_SERVER_SHIM"),
    ("test.sh", "DATADIR=/data/inferenceserver/${REPO_VERSION}", "DATADIR=$THAW_DATADIR"),
)


def _prepare(mirror: Mirror, work: Path) -> tuple[Path, dict[str, str]]:
    """The suite's directory under `work/qa`, edited, beside qa/common's two files, and
    Triton's data directory, as much of it as test.sh reads."""
    suite = work / "qa" / "L0_vertex_ai"
    suite.mkdir(parents=True)
    for name in ("util.sh", "test_util.py"):
        mirror.copy(f"qa/common/{name}", work / "qa" / "common" / name)
    for name in FILES:
        mirror.copy(f"{SUITE}/{name}", suite / name)
    apply_edits(suite, EDITS)
    data = work / "data"
    copy_models(mirror, "qa_model_repository", data / "qa_model_repository", [MODEL])
    return suite, {"THAW_DATADIR": str(data)}


def main(argv: list[str] | None = None) -> int:
    return run_test_sh("L0_vertex_ai", _prepare, argv, timeout_s=TIMEOUT_S, doc=__doc__ or "")


if __name__ == "__main__":
    sys.exit(main())
