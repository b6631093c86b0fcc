"""The benchmark harness starts, measures and stops a real `thaw serve`, the peer always present."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from benchmarks.peers import PeerError, ThawPeer
from benchmarks.workloads import add_sub_workload, write_add_sub
from tests.fixtures.serve_process import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


def test_thaw_peer_serves_add_sub_and_stops(tmp_path: Path) -> None:
    write_add_sub(tmp_path)
    handle = ThawPeer().start(tmp_path, free_port(), timeout_s=120)
    try:
        workload = add_sub_workload()
        request = urllib.request.Request(
            handle.url + workload.payload.path,
            data=workload.payload.body,
            headers=workload.payload.headers,
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert workload.check(response.read()) is None
    finally:
        handle.stop()
    assert handle.process.returncode is not None


def test_a_peer_that_dies_at_start_is_reported_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(PeerError, match="exited"):
        ThawPeer().start(tmp_path / "no-such-repo", free_port(), timeout_s=60)


def test_benchmark_script_prints_a_table_for_thaw(tmp_path: Path) -> None:
    out = tmp_path / "cells.json"
    argv = [sys.executable, str(ROOT / "benchmarks" / "serve_throughput.py"), "--peers", "thaw",
            "--models", "add_sub", "--concurrency", "1", "4", "--duration-s", "0.5",
            "--warmup-s", "0.2", "--no-netns", "--json", str(out),
            "--protocols", "http,grpc"]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=True)
    assert "| http | add_sub | 4 | thaw |" in result.stdout
    assert "| grpc | add_sub | 4 | thaw |" in result.stdout
    cells = json.loads(out.read_text())
    assert {c["concurrency"] for c in cells} == {1, 4}
    assert {c["protocol"] for c in cells} == {"http", "grpc"}
    assert all(c["rps"] > 0 and c["errors"] == 0 for c in cells)
