"""Triton's qa/L0_server_status as a suite of tests.conformance.triton_qa: test.sh's one server
start in poll mode, ServerMetadataTest, then the repository edited under the running server
(versions 2 and 3 of the int32 models removed, version 7 of graphdef_float16_float32_float32
added) and, 3 s later (test.sh's `sleep 3`), ModelMetadataTest.

TRITON_SERVER_VERSION, which the tests compare with the server's metadata, is Thaw's version
(test.sh reads it from the container's environment).
"""

from __future__ import annotations

import json
import shutil
import time

from tests.conformance.qa_checkout import Result, run_unittest
from tests.conformance.qa_servers import start
from tests.conformance.qa_suite import Suite, SuiteRun
from tests.fixtures.triton_qa_more_repos import build_server_status_repo
from thawwire.server_info import server_version

__all__ = ["DESELECT", "L0_SERVER_STATUS"]

_FILE = "server_status_test.py"
_FLAGS = ("--repository-poll-secs=1", "--model-control-mode=poll")
_POLL_WAIT_S = 3.0  # test.sh's `sleep 3` after it edits the repository


# What cannot pass on stand-ins: test id suffix -> why.
DESELECT = {
    "test_model_latest_infer": (
        "checks graphdef_int32_int32_int32's platform is tensorflow_graphdef: an ONNX model "
        "stands in under that name"
    ),
    "test_infer_stats_no_model": (
        "counts 219 ready versions: every model of Triton's whole qa_model_repository, "
        "TensorFlow and TensorRT ones included (only the models the tests name are served)"
    ),
}


def _unittest(run: SuiteRun, target: str) -> list[Result]:
    env = {"TRITON_SERVER_VERSION": server_version()}
    listing = run_unittest(run.qa_dir, "--list", f"server_status_test.{target}", env=env)
    ids = listing.stdout.split()
    results = [
        Result(run.label, _FILE, test_id.rsplit(".", 1)[-1], "deselected", DESELECT[name])
        for test_id in ids
        if (name := test_id.rsplit(".", 1)[-1]) in DESELECT
    ]
    selected = [test_id for test_id in ids if test_id.rsplit(".", 1)[-1] not in DESELECT]
    report = run.qa_dir / f"{target}.json"
    proc = run_unittest(run.qa_dir, "--out", str(report), *selected, env=env)
    if not report.is_file():
        return [*results, Result(run.label, _FILE, target, "error", proc.stderr.strip()[-240:])]
    rows = json.loads(report.read_text())
    return results + [
        Result(run.label, _FILE, test_id.rsplit(".", 1)[-1], row["outcome"],
               " ".join(row["detail"].split())[:240])
        for test_id, row in rows.items()
    ]  # fmt: skip


def _edit_repository(run: SuiteRun) -> None:
    """test.sh's edits between the two test classes."""
    models = run.qa_dir / "models"
    for model in ("graphdef_int32_int32_int32", "onnx_int32_int32_int32"):
        for version in ("2", "3"):
            shutil.rmtree(models / model / version)
    added = models / "graphdef_float16_float32_float32"
    shutil.copytree(added / "1", added / "7")


def _run(run: SuiteRun) -> list[Result]:
    try:
        server = start(run.kind, run.qa_dir / "models", _FLAGS)
    except RuntimeError as exc:
        last = str(exc).strip().splitlines()[-1][:200]
        return [Result(run.label, _FILE, "server start", "error", f"did not start: {last}")]
    try:
        results = _unittest(run, "ServerMetadataTest")
        _edit_repository(run)
        time.sleep(_POLL_WAIT_S)
        results += _unittest(run, "ModelMetadataTest")
    finally:
        server.stop()
    return results


L0_SERVER_STATUS = Suite(
    "L0_server_status",
    (_FILE,),
    {"models": build_server_status_repo},
    (),
    runner=_run,
)
