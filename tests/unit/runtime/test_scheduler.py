"""The scheduler: one queue, one worker per instance, results back on the loop."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from runtime.backends.base import ExecTimings
from runtime.errors import ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.observe.stats import FailureReason, ModelStats
from runtime.scheduling.batch_planner import DynamicBatching
from runtime.scheduling.scheduler import Scheduler
from tests.fakes.loop import eventually


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


class _GatedBackend:
    """Records the ids of every batch it executes; each execution waits for `go` (a thread
    event: the worker thread blocks there, as a slow model would)."""

    gil_bound = False
    used_image = False
    execute_async = None

    def __init__(self) -> None:
        self.timings = ExecTimings()
        self.go = threading.Event()
        self.began = threading.Event()
        self.batches: list[list[str]] = []

    def load(self, ctx: object) -> None: ...

    def unload(self) -> None: ...

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        self.batches.append([r.id or "" for r in requests])
        self.began.set()
        assert self.go.wait(30), "the test never let the model run"
        return [InferResponse("m", "1", r.inputs, id=r.id) for r in requests]


async def _cancel_queued(
    scheduler: Scheduler, backend: _GatedBackend, cancel: list[str], keep: list[str]
) -> list[InferResponse]:
    """Run "first"; while it executes, queue `cancel` and `keep` (in that order), cancel the
    tasks of `cancel`, then let the model run; the answers of `keep`."""
    first = asyncio.create_task(scheduler.submit(_request("first"), batch_size=1, received_ns=0))
    assert await asyncio.to_thread(backend.began.wait, 30)
    tasks = {
        rid: asyncio.create_task(scheduler.submit(_request(rid), batch_size=1, received_ns=0))
        for rid in [*cancel, *keep]
    }
    await asyncio.sleep(0)  # each is queued
    assert scheduler.pending() == len(tasks)
    for rid in cancel:
        tasks[rid].cancel()
    await asyncio.sleep(0)
    backend.go.set()
    await first
    return list(await asyncio.gather(*(tasks[rid] for rid in keep)))


async def test_a_request_cancelled_while_queued_never_runs_and_counts_canceled() -> None:
    backend = _GatedBackend()
    stats = ModelStats()
    scheduler = Scheduler("m", "1", [backend], stats)
    answers = await _cancel_queued(scheduler, backend, ["gone1", "gone2"], ["kept"])
    assert [a.id for a in answers] == ["kept"]
    assert backend.batches == [["first"], ["kept"]]
    assert stats.failures[FailureReason.CANCELED] == 2 and stats.fail.count == 2
    assert stats.success.count == 2 and stats.execution_count == 2
    assert scheduler.pending() == 0
    follow = await scheduler.submit(_request("after"), batch_size=1, received_ns=0)
    assert follow.id == "after"  # the worker and the queue's counts are intact
    await asyncio.to_thread(scheduler.join)


async def test_a_dynamic_batch_runs_without_its_cancelled_requests() -> None:
    backend = _GatedBackend()
    stats = ModelStats()
    policy = DynamicBatching(max_batch_size=4, preferred=frozenset({3}))
    scheduler = Scheduler("m", "1", [backend], stats, policy=policy)
    answers = await _cancel_queued(scheduler, backend, ["gone"], ["a", "b"])
    assert [a.id for a in answers] == ["a", "b"]
    assert backend.batches == [["first"], ["a", "b"]]  # the batch formed with "gone" ran without it
    assert stats.failures[FailureReason.CANCELED] == 1
    await asyncio.to_thread(scheduler.join)


async def test_a_batch_whose_requests_were_all_cancelled_is_not_executed() -> None:
    backend = _GatedBackend()
    stats = ModelStats()
    policy = DynamicBatching(max_batch_size=4, preferred=frozenset({2}))
    scheduler = Scheduler("m", "1", [backend], stats, policy=policy)
    await _cancel_queued(scheduler, backend, ["x", "y"], [])
    await eventually(lambda: scheduler.pending() == 0)  # the batch [x, y] was formed
    await eventually(lambda: stats.failures[FailureReason.CANCELED] == 2)
    assert backend.batches == [["first"]]
    assert stats.failures[FailureReason.CANCELED] == 2 and stats.execution_count == 1
    follow = await scheduler.submit(_request("after"), batch_size=1, received_ns=0)
    assert follow.id == "after"
    await asyncio.to_thread(scheduler.join)


class _GatedStubBackend:
    """A backend whose execute is an awaited round trip (a stub process's): each waits for
    `go`, an asyncio event, and records its ids when it starts."""

    gil_bound = False
    used_image = False

    def __init__(self) -> None:
        self.timings = ExecTimings()
        self.go = asyncio.Event()
        self.batches: list[list[str]] = []

    def load(self, ctx: object) -> None: ...

    def unload(self) -> None: ...

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        raise AssertionError("a loop-driven backend is awaited, never called")

    @property
    def execute_async(self) -> object:
        return self._execute

    async def _execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        self.batches.append([r.id or "" for r in requests])
        await self.go.wait()
        return [InferResponse("m", "1", r.inputs, id=r.id) for r in requests]


async def test_a_stub_models_cancelled_request_behind_its_pipeline_never_runs() -> None:
    # One instance of a stub-process model has 8 requests on their way to the stub at once:
    # those run whatever happens; the ones waiting behind them are checked before they go.
    backend = _GatedStubBackend()
    stats = ModelStats()
    scheduler = Scheduler("m", "1", [backend], stats)  # type: ignore[list-item]
    ahead = [
        asyncio.create_task(scheduler.submit(_request(f"p{i}"), batch_size=1, received_ns=0))
        for i in range(8)
    ]
    behind = {
        rid: asyncio.create_task(scheduler.submit(_request(rid), batch_size=1, received_ns=0))
        for rid in ("gone", "kept")
    }
    await eventually(lambda: len(backend.batches) == 8)  # the pipeline is full
    assert scheduler.pending() == 9  # "gone" and "kept" wait, and 7 of the 8 on their way
    behind["gone"].cancel()
    await asyncio.sleep(0)
    backend.go.set()
    await asyncio.gather(*ahead)
    assert (await behind["kept"]).id == "kept"
    assert [b for b in backend.batches if b[0] in behind] == [["kept"]]
    assert stats.failures[FailureReason.CANCELED] == 1
    scheduler.close()
    await asyncio.to_thread(scheduler.join)
