"""A one-minute soak of a real `thaw serve --front native` (benchmarks/soak.py --target
serve-native): steady traffic on hot and forwarded models, hostile requests, load/unload churn
and stub kills under load, every invariant asserted. `make test-slow`; the full 10-minute run
and its report: docs/benchmarks/2026-12-07-native-front-soak.md.

As in test_soak.py, a minute is too short for slopes to mean much, so their tolerances are
loose here; the fd leak check that does hold at this length is the quiet checkpoint (the
server's and the front's fds with no traffic, before and after: exact)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.native_front_models import front_built

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not front_built(), reason="the native front is not built (make native)"),
]

ROOT = Path(__file__).resolve().parents[3]


def test_a_one_minute_native_front_soak_holds_every_invariant(tmp_path: Path) -> None:
    argv = [sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--target", "serve-native",
            "--duration", "60", "--kill-every-s", "8", "--out", str(tmp_path),
            "--rss-slope-mib-per-min", "8", "--fd-slope-per-min", "60"]  # fmt: skip
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    report_path = tmp_path / "soak-report.json"
    assert report_path.is_file(), f"no report; stderr: {run.stderr[-3000:]}"
    report = json.loads(report_path.read_text())
    failed = [c for c in report["checks"] if not c["held"]]
    assert not failed, json.dumps({"failed": failed, "failures": report["failures"]}, indent=1)
    assert run.returncode == 0, run.stdout[-3000:]
    tallies = report["tallies"]
    # every class of traffic really ran, the steady ones all answered
    for klass in ("http_json", "http_binary", "grpc"):
        assert tallies[klass]["ok"] == tallies[klass]["sent"] > 0, klass
    for klass in ("churn_http_json", "churn_http_binary", "churn_grpc"):
        assert tallies[klass]["ok"] > 0, klass
    assert len({k for k in tallies if k.startswith("hostile:")}) >= 10
    assert report["unload_cycles"] >= 3 and report["stub_kills"] >= 2
