"""The scheduler: one queue, one worker per instance, results back on the loop."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from runtime.backends.base import ExecTimings
from runtime.errors import ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.observe.stats import ModelStats
from runtime.scheduling.scheduler import Scheduler


class _SleepyBackend:
    """A backend with behaviour: sleeps, records its thread, fails on request id 'boom'."""

    gil_bound = False
    used_image = False
    execute_async = None

    def __init__(self, delay_s: float) -> None:
        self.timings = ExecTimings()
        self.delay_s = delay_s
        self.threads: set[str] = set()
        self.started = threading.Event()  # set once an execution has begun
        self.spans: list[tuple[float, float]] = []  # (began, ended) of each execution, monotonic

    def load(self, ctx: object) -> None: ...

    def unload(self) -> None: ...

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        self.threads.add(threading.current_thread().name)
        self.started.set()
        if any(r.id == "crash" for r in requests):
            raise KeyError("backend bug")
        began = time.monotonic()
        time.sleep(self.delay_s)
        self.spans.append((began, time.monotonic()))
        return [
            ServingError("boom") if r.id == "boom" else InferResponse("m", "1", r.inputs, id=r.id)
            for r in requests
        ]


def _request(rid: str) -> InferRequest:
    data = np.zeros(1, np.float32)
    return InferRequest("m", "1", [InferTensor("X", "FP32", (1,), data)], id=rid)


async def test_two_instances_run_in_parallel() -> None:
    a, b = _SleepyBackend(0.3), _SleepyBackend(0.3)
    scheduler = Scheduler("m", "1", [a, b], ModelStats())
    await asyncio.gather(
        *(scheduler.submit(_request(str(i)), batch_size=1, received_ns=0) for i in range(4))
    )
    await asyncio.to_thread(scheduler.join)
    assert a.threads and b.threads and a.threads != b.threads
    # In parallel: an execution on one instance overlapped one on the other (serial, each
    # would begin after the last ended).
    assert any(a0 < b1 and b0 < a1 for a0, a1 in a.spans for b0, b1 in b.spans)


async def test_errors_and_crashes_reach_only_their_request() -> None:
    backend = _SleepyBackend(0.0)
    stats = ModelStats()
    scheduler = Scheduler("m", "1", [backend], stats)
    ok = await scheduler.submit(_request("fine"), batch_size=1, received_ns=0)
    assert ok.id == "fine"
    for rid, fragment in (("boom", "boom"), ("crash", "backend bug")):
        try:
            await scheduler.submit(_request(rid), batch_size=1, received_ns=0)
            raise AssertionError("expected an error")
        except ServingError as exc:
            assert fragment in exc.message
    again = await scheduler.submit(_request("again"), batch_size=1, received_ns=0)
    assert again.id == "again"
    scheduler.close()
    try:
        await scheduler.submit(_request("late"), batch_size=1, received_ns=0)
        raise AssertionError("expected refusal after close")
    except ServingError as exc:
        assert exc.status == 503
    await asyncio.to_thread(scheduler.join)
    assert stats.success.count == 2 and stats.fail.count == 2 and stats.execution_count == 4


async def test_cancelled_caller_does_not_break_the_worker() -> None:
    backend = _SleepyBackend(0.1)
    scheduler = Scheduler("m", "1", [backend], ModelStats())
    task = asyncio.create_task(scheduler.submit(_request("x"), batch_size=1, received_ns=0))
    assert await asyncio.to_thread(backend.started.wait, 5)  # "x" is executing: cancel now
    task.cancel()
    follow = await scheduler.submit(_request("y"), batch_size=1, received_ns=0)
    assert follow.id == "y"
    await asyncio.to_thread(scheduler.join)


class _TinyPythonBackend(_SleepyBackend):
    """A GIL-bound backend (like a tiny Triton python model) that can be made slow."""

    gil_bound = True


async def test_a_tiny_python_model_runs_on_the_loop_once_proven_and_leaves_it_when_slow() -> None:
    # "Tiny" is 20 ms here, not the default's 200 µs: the warm-up runs' wall-clock time includes
    # preemption, and beside a second make test enough of 64 runs took over 200 µs that the
    # model was (rightly) never proven tiny. A run that does nothing takes 20 ms only when the
    # machine stops it that long; the slow phase (50 ms a run) is over the ban (10 ms).
    backend = _TinyPythonBackend(0.0)
    scheduler = Scheduler("m", "1", [backend], ModelStats(), inline_max_us=20_000)
    loop_thread = threading.current_thread().name
    for i in range(64):  # the warm-up runs in the worker thread
        await scheduler.submit(_request(str(i)), batch_size=1, received_ns=0)
    assert loop_thread not in backend.threads
    await scheduler.submit(_request("tiny"), batch_size=1, received_ns=0)
    assert loop_thread in backend.threads  # proven tiny: no thread hand-off any more
    backend.delay_s = 0.05  # the model turns slow (50 ms a run)
    for i in range(3):
        await scheduler.submit(_request(f"slow{i}"), batch_size=1, received_ns=0)
    backend.threads.clear()
    await scheduler.submit(_request("after"), batch_size=1, received_ns=0)
    assert backend.threads and loop_thread not in backend.threads  # back in its thread
    await asyncio.to_thread(scheduler.join)


async def test_inline_never_overlaps_a_run_in_the_worker_thread() -> None:
    backend = _TinyPythonBackend(0.0)
    scheduler = Scheduler("m", "1", [backend], ModelStats(), inline_max_us=200)
    for i in range(64):
        await scheduler.submit(_request(str(i)), batch_size=1, received_ns=0)
    running = 0
    overlaps = 0
    original = backend.execute

    def counting(requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        nonlocal running, overlaps
        running += 1
        overlaps += running > 1
        try:
            return original(requests)
        finally:
            running -= 1

    backend.execute = counting  # type: ignore[method-assign]
    results = await asyncio.gather(
        *(scheduler.submit(_request(str(i)), batch_size=1, received_ns=0) for i in range(200))
    )
    assert [r.id for r in results] == [str(i) for i in range(200)]
    assert overlaps == 0
    await asyncio.to_thread(scheduler.join)


async def test_a_backend_that_releases_the_gil_keeps_its_thread() -> None:
    backend = _SleepyBackend(0.0)  # no `gil_bound`: e.g. onnxruntime, torch
    scheduler = Scheduler("m", "1", [backend], ModelStats(), inline_max_us=200)
    for i in range(100):
        await scheduler.submit(_request(str(i)), batch_size=1, received_ns=0)
    assert threading.current_thread().name not in backend.threads
    await asyncio.to_thread(scheduler.join)
