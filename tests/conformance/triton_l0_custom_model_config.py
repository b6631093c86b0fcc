"""Triton's qa/L0_custom_model_config, its own test.sh, against `thaw serve`: a model with
`configs/h100.pbtxt`, `configs/v100.pbtxt` and `configs/config.pbtxt` beside its config.pbtxt,
each naming other versions; six starts with `--model-config-name` unset, `h100`, `v100`,
`config`, `h200` (no such file: config.pbtxt is read) and empty (the start must fail), each
checked by grepping `/v2/models/<model>/config`'s compact JSON for the versions of the config
that was read.

    unshare -n sh -c 'ip link set lo up && \
        .venv/bin/python -m tests.conformance.triton_l0_custom_model_config'

test.sh and qa/common/util.sh (its `run_server`) are read from the server mirror (`--mirror`,
default `$TRITON_SERVER_MIRROR`; without one the run says so and exits 0) and run by bash
unchanged but for `EDITS`: `SERVER` is a two-line shim that runs `thaw serve` with the flags
test.sh gives, and `DATADIR` a directory holding Triton's
`qa_model_repository/savedmodel_nobatch_float32_float32_float32` as its ONNX twin (made by
Triton's qa/common/gen_qa_models.py: tests/fixtures/triton_qa_gen.py; the same inputs, outputs
and dims, and a `version_policy:` line for test.sh's sed to rewrite). It uses Triton's port
8000: run it in a network namespace of its own, as above.

Exit status: test.sh's (0 when it says "Test Passed").
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conformance.qa_test_sh import run_test_sh
from tests.conformance.triton_qa import apply_edits
from tests.fixtures.triton_qa_gen import copy_models, stand_in
from tests.fixtures.triton_qa_suite_repos import Mirror

__all__ = ["EDITS", "main"]

SUITE = "qa/L0_custom_model_config"
MODEL = "savedmodel_nobatch_float32_float32_float32"
TWIN = "onnx_nobatch_float32_float32_float32"
TIMEOUT_S = 600

# (file, text, replacement): what differs from Triton's run, each a stand-in named above.
EDITS: tuple[tuple[str, str, str], ...] = (
    ("test.sh", "SERVER=/opt/tritonserver/bin/tritonserver", "SERVER=$THAW_SERVER_SHIM"),
    ("test.sh", 'DATADIR="/data/inferenceserver/${REPO_VERSION}"', "DATADIR=$THAW_DATADIR"),
)


def _prepare(mirror: Mirror, work: Path) -> tuple[Path, dict[str, str]]:
    """The suite's directory under `work/qa`, edited, beside `qa/common/util.sh`, and
    test.sh's data directory."""
    suite = work / "qa" / "L0_custom_model_config"
    suite.mkdir(parents=True)
    mirror.copy("qa/common/util.sh", work / "qa" / "common" / "util.sh")
    mirror.copy(f"{SUITE}/test.sh", suite / "test.sh")
    apply_edits(suite, EDITS)
    generated = work / "generated"
    copy_models(mirror, "qa_model_repository", generated, [TWIN])
    repo = work / "data" / "qa_model_repository"
    repo.mkdir(parents=True)
    stand_in(generated / TWIN, repo, MODEL)
    return suite, {"THAW_DATADIR": str(work / "data")}


def main(argv: list[str] | None = None) -> int:
    return run_test_sh(
        "L0_custom_model_config", _prepare, argv, timeout_s=TIMEOUT_S, doc=__doc__ or ""
    )


if __name__ == "__main__":
    sys.exit(main())
