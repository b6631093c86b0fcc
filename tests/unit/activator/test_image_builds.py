"""`thaw up`'s start-up image builds: progress in the log and in the status document's states."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from activator.fleet.image_builder import ImageJobs

# Stands in for `thaw snapshot build MODEL_DIR --store CACHE`: argv[3] is the model directory;
# a model named "py*" has nothing to image (exit 3), "bad*" fails, others build.
_FAKE_BUILD = """
import sys
name = sys.argv[3].rstrip("/").rsplit("/", 1)[-1]
if name.startswith("py"):
    sys.exit(3)
if name.startswith("bad"):
    print("error: chunk write failed", file=sys.stderr)
    sys.exit(1)
"""


async def test_each_build_reports_its_state_and_the_log_shows_progress(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dirs = [tmp_path / n for n in ("onnx", "python", "bad")]
    states: list[tuple[str, str]] = []
    caplog.set_level(logging.INFO, logger="activator.fleet.image_builder")
    jobs = ImageJobs(
        [sys.executable, "-c", _FAKE_BUILD],
        dirs,
        tmp_path / "cache",
        store=None,
        timeout_s=90,  # idle CPU priority: slow on a busy machine (test_image_jobs.py)
        on_state=lambda model, state: states.append((model, state)),
    )
    assert jobs.states == dict.fromkeys(("onnx", "python", "bad"), "queued")
    results = await jobs.run()
    assert results == {
        "onnx": "built",
        "python": "no weights",
        "bad": "failed: error: chunk write failed",
    }
    assert states == [
        ("onnx", "building"), ("onnx", "built"),
        ("python", "building"), ("python", "no weights"),
        ("bad", "building"), ("bad", "failed: error: chunk write failed"),
    ]  # fmt: skip
    log = caplog.text
    for n, model in enumerate(("onnx", "python", "bad"), 1):
        assert f"model={model} image build {n}/3 started" in log
    assert "image builds done: 3/3 in" in log
    assert "(1 built, 1 failed, 1 no weights)" in log
