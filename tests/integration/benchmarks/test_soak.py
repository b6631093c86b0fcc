"""A one-minute soak of a real `thaw up` (benchmarks/soak.py): mixed good and hostile traffic
with scale-to-zero churn, every invariant asserted. `make test-slow`; the full 10-minute run
and its report: docs/benchmarks/2026-12-01-soak.md.

A minute is too short for RSS and fd slopes to mean much (a woken model's replica comes and
goes every few seconds and each one holds activator fds, so the activator's count swings by
~30 between samples: the slope's standard error over 40 s is ~10 fds/min), so the slope
tolerances here are loose; the fd leak check that does hold at this length is the quiet
checkpoint (the activator's fds with every model at zero, before and after: exact)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]


def test_a_one_minute_soak_holds_every_invariant(tmp_path: Path) -> None:
    argv = [sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--duration", "60",
            "--out", str(tmp_path), "--rss-slope-mib-per-min", "8",
            "--fd-slope-per-min", "60"]  # fmt: skip
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    report_path = tmp_path / "soak-report.json"
    assert report_path.is_file(), f"no report; stderr: {run.stderr[-3000:]}"
    report = json.loads(report_path.read_text())
    failed = [c for c in report["checks"] if not c["held"]]
    assert not failed, json.dumps({"failed": failed, "failures": report["failures"]}, indent=1)
    assert run.returncode == 0, run.stdout[-3000:]
    tallies = report["tallies"]
    # every class of traffic really ran
    for klass in ("http_json", "http_binary", "grpc", "wake_http_json", "wake_grpc"):
        assert tallies[klass]["ok"] == tallies[klass]["sent"] > 0, klass
    hostile = {k for k in tallies if k.startswith("hostile:")}
    assert len(hostile) >= 10, hostile
    assert sum(report["cold_starts"].values()) >= 5  # woken from zero again and again
