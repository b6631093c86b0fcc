"""Triton's qa/L0_config_json, its own test.sh, against `thaw serve`: each trial starts the
server on a model repository, reads `/v2/models/<model>/config` with curl and greps the compact
JSON for what Triton writes (dims, reshape, version policy, batchers, an ensemble's versions,
warm-up samples, queue policies at the uint32 / uint64 limits).

    unshare -n sh -c 'ip link set lo up && \
        .venv/bin/python -m tests.conformance.triton_l0_config_json'

test.sh, its two .pbtxt files and qa/common/util.sh (its `run_server`) are read from the
server mirror (`--mirror`, default `$TRITON_SERVER_MIRROR`; without one the run says so and
exits 0) and run by bash unchanged but for `EDITS`: `SERVER` is a two-line shim that runs
`thaw serve` with the flags test.sh gives, `DATADIR` a directory holding Triton's
`qa_model_repository/savedmodel_nobatch_float32_float32_float32` as its ONNX twin
(`onnx_nobatch_float32_float32_float32`, made by Triton's qa/common/gen_qa_models.py:
tests/fixtures/triton_qa_gen.py; the same inputs, outputs, dims and version policy), and the
`max_priority_level` model of Triton's C++ `identity` backend is a Python identity model. It
uses Triton's port 8000: run it in a network namespace of its own, as above.

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

SUITE = "qa/L0_config_json"
FILES = ("test.sh", "ensemble_config.pbtxt", "max_priority_level.pbtxt")
MODEL = "savedmodel_nobatch_float32_float32_float32"
TIMEOUT_S = 900

_IDENTITY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""

# (file, text, replacement): what differs from Triton's run, each a stand-in named above.
EDITS: tuple[tuple[str, str, str], ...] = (
    ("test.sh", "SERVER=/opt/tritonserver/bin/tritonserver", "SERVER=$THAW_SERVER_SHIM"),
    ("test.sh", 'DATADIR="/data/inferenceserver/${REPO_VERSION}"', "DATADIR=$THAW_DATADIR"),
    (
        "test.sh",
        "cp max_priority_level.pbtxt models/max_priority_level/config.pbtxt",
        "cp max_priority_level.pbtxt models/max_priority_level/config.pbtxt && "
        "cp identity_model.py models/max_priority_level/1/model.py",
    ),
    ("max_priority_level.pbtxt", 'backend: "identity"', 'backend: "python"'),
)


def _prepare(mirror: Mirror, work: Path) -> Path:
    """The suite's directory under `work/qa`, edited, beside `qa/common/util.sh`."""
    suite = work / "qa" / "L0_config_json"
    suite.mkdir(parents=True)
    mirror.copy("qa/common/util.sh", work / "qa" / "common" / "util.sh")
    for name in FILES:
        mirror.copy(f"{SUITE}/{name}", suite / name)
    apply_edits(suite, EDITS)
    (suite / "identity_model.py").write_text(_IDENTITY)
    return suite


def _datadir(mirror: Mirror, work: Path) -> Path:
    """Triton's data directory, as much of it as test.sh reads."""
    generated = work / "generated"
    copy_models(mirror, "qa_model_repository", generated, ["onnx_nobatch_float32_float32_float32"])
    repo = work / "data" / "qa_model_repository"
    repo.mkdir(parents=True)
    stand_in(generated / "onnx_nobatch_float32_float32_float32", repo, MODEL)
    return work / "data"


def _prepare_run(mirror: Mirror, work: Path) -> tuple[Path, dict[str, str]]:
    return _prepare(mirror, work), {"THAW_DATADIR": str(_datadir(mirror, work))}


def main(argv: list[str] | None = None) -> int:
    return run_test_sh("L0_config_json", _prepare_run, argv, timeout_s=TIMEOUT_S, doc=__doc__ or "")


if __name__ == "__main__":
    sys.exit(main())
