"""Run a pytest-style QA file of Triton's (a plain class, not a unittest.TestCase, as
qa/L0_backend_python/test_infer_shm_leak.py) as test.sh runs it, `python -m pytest
--junitxml`, and read the report into unittest_json's rows: {test id: {outcome, detail}}."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conformance.qa_checkout import qa_python_path

__all__ = ["junit_rows", "run_pytest"]


def run_pytest(qa_dir: Path, file: str, env: dict[str, str]) -> dict[str, dict[str, str]]:
    """`python -m pytest FILE` in `qa_dir` (Triton's triton_shm_monitor stood in on the path)."""
    report = qa_dir / f"{Path(file).stem}.junit.xml"
    path = qa_python_path()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         f"--junitxml={report}", file],
        cwd=qa_dir, env={**os.environ, **env, "PYTHONPATH": path},
        capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    if not report.is_file():
        raise SystemExit(f"{file} did not report:\n{(proc.stdout + proc.stderr)[-4000:]}")
    return junit_rows(report.read_text())


def junit_rows(text: str) -> dict[str, dict[str, str]]:
    """Each <testcase> of a JUnit XML report: passed, failed, error or skipped, and why."""
    rows: dict[str, dict[str, str]] = {}
    for case in ET.fromstring(text).iter("testcase"):
        test_id = f"{case.get('classname', '')}.{case.get('name', '')}"
        outcome, detail = "passed", ""
        for tag, name in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            found = case.find(tag)
            if found is not None:
                outcome, detail = name, found.get("message") or (found.text or "")
                break
        rows[test_id] = {"outcome": outcome, "detail": detail}
    return rows
