"""`checkov -d infra/terraform` finds no failed check, and every check it skips is skipped inline,
next to its resource, with a reason. checkov lives in its own virtualenv (it pins an old boto3):
`make checkov` (and `make test`) installs it into .venv-checkov."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.fixtures.terraform_tree import REPO_ROOT, TERRAFORM_ROOT

CHECKOV = REPO_ROOT / ".venv-checkov" / "bin" / "checkov"


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    if not CHECKOV.is_file():
        pytest.skip("checkov is not installed: `make checkov` installs it into .venv-checkov")
    proc = subprocess.run(
        [
            str(CHECKOV),
            "--directory",
            str(TERRAFORM_ROOT),
            "--framework",
            "terraform",
            "--output",
            "json",
            "--compact",
            # Offline: no Prisma Cloud guidelines download, no external module download.
            "--skip-download",
        ],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    # checkov exits 1 when a check fails; the report says which.
    assert proc.returncode in (0, 1), proc.stderr[-4000:]
    parsed = json.loads(proc.stdout)
    assert isinstance(parsed, dict), "expected one terraform report"
    return parsed


def test_no_check_fails(report: dict[str, Any]) -> None:
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']}): {c['check_name']}"
        for c in report["results"]["failed_checks"]
    ]
    assert not failed, "\n".join(failed)
    assert report["summary"]["passed"] > 50, "checkov ran too few checks to mean anything"


def test_every_file_parses(report: dict[str, Any]) -> None:
    assert report["results"]["parsing_errors"] == []


def test_every_skip_is_justified_inline(report: dict[str, Any]) -> None:
    for check in report["results"]["skipped_checks"]:
        reason = str(check["check_result"].get("suppress_comment", "")).strip()
        where = f"{check['check_id']} on {check['resource']}"
        assert len(reason) >= 30, f"{where}: skip without a real reason ({reason!r})"
        source = (TERRAFORM_ROOT / check["file_path"].lstrip("/")).read_text().splitlines()
        start, end = check["file_line_range"]
        block = "\n".join(source[start - 1 : end])
        assert f"checkov:skip={check['check_id']}:" in block, (
            f"{where}: the skip must sit inside the resource it skips"
        )
