"""Start-up image work: builds without a store, pulls with one, at idle CPU priority, per model."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from activator.fleet.image_builder import ImageJobs
from activator.observe.status_document import ImageState
from tests.fakes.loop import HUNG_AFTER_S, eventually

# A stand-in for `thaw`: records its process id, scheduling policy and thread settings, then
# answers as `thaw snapshot build|ls|pull` would for the models the test names. The pull of
# `slow_model` lasts until the test creates the file FAKE_THAW_GO (a minute at most).
# ImageJobs sets the idle policy just after the child starts, so on a loaded machine the fake
# can run before it does: a build gives the policy up to 10 s to arrive before it records it
# (a build never set to idle still records SCHED_OTHER, and the test fails). A pull records at
# once: a pull boosted as it started never becomes idle.
_FAKE_THAW = """
import json, os, sys, time
args = sys.argv[1:]
log = os.environ["FAKE_THAW_LOG"]
verb = args[1]
deadline = time.monotonic() + 10
while verb == "build" and os.sched_getscheduler(0) != os.SCHED_IDLE and time.monotonic() < deadline:
    time.sleep(0.01)
with open(log, "a") as f:
    f.write(json.dumps({"args": args, "pid": os.getpid(), "policy": os.sched_getscheduler(0),
                        "omp": os.environ.get("OMP_NUM_THREADS")}) + "\\n")
if verb == "pull" and args[2] == "slow_model":
    deadline = time.monotonic() + 60
    while not os.path.exists(os.environ["FAKE_THAW_GO"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    with open(log, "a") as f:
        f.write(json.dumps({"args": ["done"], "policy": os.sched_getscheduler(0)}) + "\\n")
if verb == "ls":
    print(json.dumps([{"model": "in_store", "version": "1", "target": "cpu"},
                      {"model": "slow_model", "version": "1", "target": "cpu"},
                      {"model": "other", "version": "1", "target": "cpu"},
                      {"model": "stale", "version": "1", "target": "cpu"},
                      {"model": "gpu_only", "version": "1", "target": "cuda:sm_90"}]))
    sys.exit(0)
name = os.path.basename(args[2].rstrip("/"))
if name == "stale":
    sys.exit(4)
if name == "python_model":
    sys.exit(3)
if name == "broken":
    print("bad weights: truncated", file=sys.stderr)
    sys.exit(1)
sys.exit(0)
"""


_JOB_TIMEOUT_S = 90.0  # under pytest-timeout's 120 s


def _policy(pid: int) -> int | None:
    """The scheduling policy of process `pid`; None once it has ended."""
    try:
        return os.sched_getscheduler(pid)
    except OSError:
        return None


def _pull_pid(log: Path) -> int | None:
    """The process id the fake recorded for the pull of `slow_model`, once it has started."""
    for line in log.read_text().splitlines() if log.exists() else []:
        call = json.loads(line)
        if call["args"][1:3] == ["pull", "slow_model"]:
            return int(call["pid"])
    return None


def _jobs(
    tmp_path: Path,
    names: list[str],
    store: str | None,
    monkeypatch: pytest.MonkeyPatch,
    on_state: Callable[[str, str], None] | None = None,
) -> tuple[ImageJobs, Path]:
    script = tmp_path / "fake_thaw.py"
    script.write_text(_FAKE_THAW)
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv("FAKE_THAW_LOG", str(log))
    monkeypatch.setenv("FAKE_THAW_GO", str(tmp_path / "go"))
    dirs = [tmp_path / "repo" / n for n in names]
    # The jobs run at idle CPU priority (SCHED_IDLE): on a busy machine a fake's Python start
    # gets a sliver of CPU (six CPU hogs on 2 cores: this file took 59 s, 1 s without; a run
    # beside the helpers' tests failed here once with the 30 s this had).
    jobs = ImageJobs([sys.executable, str(script)], dirs, tmp_path / "cache", store=store,
                     timeout_s=_JOB_TIMEOUT_S, on_state=on_state)  # fmt: skip
    return jobs, log


async def test_without_a_store_each_model_is_built_at_idle_priority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs, log = _jobs(tmp_path, ["onnx_model", "python_model", "broken"], None, monkeypatch)
    assert set(jobs.states.values()) == {ImageState.QUEUED}
    states = await jobs.run()
    assert states["onnx_model"] == ImageState.BUILT
    assert states["python_model"] == ImageState.NO_WEIGHTS
    assert states["broken"] == "failed: bad weights: truncated"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["args"][1] for c in calls] == ["build"] * 3
    assert all(c["policy"] == os.SCHED_IDLE and c["omp"] == "1" for c in calls)


async def test_with_a_store_images_there_are_pulled_and_the_rest_said_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ["in_store", "gpu_only", "nowhere", "stale"]
    jobs, log = _jobs(tmp_path, names, "s3://bucket/images", monkeypatch)
    states = await jobs.run()
    assert states == {
        "in_store": ImageState.CACHED,
        "gpu_only": ImageState.NOT_IN_STORE,  # only a GPU image: a CPU replica loads files
        "nowhere": ImageState.NOT_IN_STORE,
        "stale": ImageState.STALE,  # built from other files than the repository's
    }
    calls = [json.loads(line)["args"] for line in log.read_text().splitlines()]
    assert calls[0][:2] == ["snapshot", "ls"]
    assert calls[1] == [
        "snapshot", "pull", "in_store", "--store", "s3://bucket/images",
        "--cache", str(tmp_path / "cache"), "--source", str(tmp_path / "repo" / "in_store"),
    ]  # fmt: skip
    assert len(calls) == 3


async def test_a_snapshotter_that_cannot_start_fails_its_model_clearly(tmp_path: Path) -> None:
    jobs = ImageJobs([str(tmp_path / "no-thaw-here")], [tmp_path / "m"], tmp_path / "cache",
                     store=None, timeout_s=_JOB_TIMEOUT_S)  # fmt: skip
    state = (await jobs.run())["m"]
    assert state.startswith("failed: could not start: [Errno 2]"), state


async def test_an_unlistable_store_fails_every_model_clearly(tmp_path: Path) -> None:
    jobs = ImageJobs([sys.executable, "-c", "import sys; sys.exit(1)"], [tmp_path / "m"],
                     tmp_path / "cache", store="s3://nope", timeout_s=_JOB_TIMEOUT_S)  # fmt: skip
    assert (await jobs.run()) == {"m": "failed: cannot list s3://nope"}


async def test_a_waking_models_pull_goes_first_and_runs_at_normal_priority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs, log = _jobs(tmp_path, ["other", "in_store", "slow_model"], "s3://b", monkeypatch)
    jobs.wanted("slow_model")  # queued third: it goes first
    running = asyncio.create_task(jobs.run())

    # Until its pull runs at idle priority (the fake waits for the go file), by events, not a
    # sleep that a loaded machine outlasts: the job set that priority as it took the pull on.
    await eventually(lambda: (pid := _pull_pid(log)) is not None and _policy(pid) == os.SCHED_IDLE)
    assert jobs.states["slow_model"] == ImageState.PULLING
    jobs.wanted("slow_model")  # its replica is waking: the pull it waits for is boosted
    (tmp_path / "go").touch()
    await asyncio.wait_for(running, HUNG_AFTER_S)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    pulled = [c["args"][2] for c in calls if c["args"][:2] == ["snapshot", "pull"]]
    assert pulled == ["slow_model", "other", "in_store"]
    done = next(c for c in calls if c["args"] == ["done"])
    assert done["policy"] == os.SCHED_OTHER


async def test_a_wake_while_its_pull_is_starting_still_boosts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The replica wakes the moment the pull is announced, before its process exists: the
    # boost must not be lost in that window (it was: nothing recorded a pull not yet started).
    def on_state(model: str, state: str) -> None:
        if model == "slow_model" and state == ImageState.PULLING:
            jobs.wanted(model)

    jobs, log = _jobs(tmp_path, ["slow_model"], "s3://b", monkeypatch, on_state)
    running = asyncio.create_task(jobs.run())

    await eventually(lambda: (pid := _pull_pid(log)) is not None and _policy(pid) == os.SCHED_OTHER)
    (tmp_path / "go").touch()
    await asyncio.wait_for(running, HUNG_AFTER_S)
    done = next(json.loads(line) for line in log.read_text().splitlines() if '"done"' in line)
    assert done["policy"] == os.SCHED_OTHER


async def test_a_model_added_or_changed_after_the_start_is_built_on_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs, log = _jobs(tmp_path, ["onnx_model"], None, monkeypatch)
    await jobs.run()
    jobs.add(tmp_path / "repo" / "late_model")  # added: queued, reported
    jobs.add(tmp_path / "repo" / "onnx_model")  # changed: built again
    jobs.add(tmp_path / "repo" / "onnx_model")  # asked twice while queued: one build
    assert jobs.states == {"onnx_model": ImageState.QUEUED, "late_model": ImageState.QUEUED}
    states = await jobs.run()
    assert states == {"onnx_model": ImageState.BUILT, "late_model": ImageState.BUILT}
    built = [json.loads(line)["args"][2] for line in log.read_text().splitlines()]
    assert [Path(b).name for b in built] == ["onnx_model", "late_model", "onnx_model"]
