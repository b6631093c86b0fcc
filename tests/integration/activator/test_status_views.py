"""`thaw status --cost`, `--json` and `--watch` against the session's real `thaw up`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration


def _status(up: UpProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "thaw.cli", "status", "--url", up.url, *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_cost_view_lists_every_served_model_with_a_total(up: UpProcess) -> None:
    done = _status(up, "--cost", "--gpu-hour-price", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["MODEL", "GPUS", "PEAK"] and "SPENT" in lines[0]
    models = {line.split()[0] for line in lines[1:-2]}
    assert models == {m["model"] for m in up.get("/thaw/status")["models"]} - {"badcfg"}
    assert lines[-2].split()[0] == "TOTAL"
    assert "money at 2 per GPU-hour" in lines[-1]


def test_json_is_the_status_document(up: UpProcess) -> None:
    done = _status(up, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert {"models", "warm_pool", "image_builds", "cold_starts", "cost"} <= set(doc)


# `python -m thaw.cli` as a terminal's foreground job runs it: Ctrl-C raises KeyboardInterrupt.
# A test run started in the background of a script (`make test &`, two runs side by side) has
# SIGINT ignored; a child inherits that and Python then never raises KeyboardInterrupt, so the
# watch would outlive its Ctrl-C (what issue 24's run saw). The default is restored for it.
_AS_A_FOREGROUND_JOB = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('thaw.cli', run_name='__main__', alter_sys=True)"
)


def test_watch_redraws_until_ctrl_c(up: UpProcess) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _AS_A_FOREGROUND_JOB,
         "status", "--url", up.url, "--watch", "0.2", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    # Three frames read: the watch is in its loop (SIGINT lands in a fetch, a write or the wait
    # between frames; each ends it the same way).
    frames = [proc.stdout.readline() for _ in range(3)]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err
    assert all(json.loads(f)["models"] for f in frames)  # one document per line, live
