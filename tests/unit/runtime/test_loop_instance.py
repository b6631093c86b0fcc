"""Instances driven from the event loop: batches awaited there, a slot each, no thread."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Sequence

from runtime.backends.base import ExecTimings
from runtime.inference import InferRequest, InferResponse
from runtime.observe.stats import ModelStats
from runtime.scheduling.batch_execution import Outcome, QueuedRequest
from runtime.scheduling.batch_planner import OneRequest, plan
from runtime.scheduling.dispatcher import Dispatcher
from runtime.scheduling.loop_instance import LoopInstance
from runtime.scheduling.scheduler import Scheduler
from tests.fakes.stepped_clock import SteppedClock


class _HeldRoundTrips:
    """An async execute that waits, on the loop, until the test answers each batch."""

    def __init__(self) -> None:
        self.running: list[tuple[list[str], asyncio.Future[None]]] = []
        self.threads: set[int] = set()

    async def __call__(
        self, batch: Sequence[QueuedRequest], started: Callable[[], int]
    ) -> list[Outcome]:
        self.threads.add(threading.get_ident())
        answered = asyncio.get_running_loop().create_future()
        self.running.append(([str(item.request.id) for item in batch], answered))
        await answered
        return [(item, InferResponse("m", "1", [], id=item.request.id)) for item in batch]

    def answer_oldest(self) -> list[str]:
        ids, answered = self.running.pop(0)
        answered.set_result(None)
        return ids


async def _turns(count: int = 5) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def test_two_slots_hold_two_batches_and_the_third_waits_for_one() -> None:
    execute = _HeldRoundTrips()
    instance = LoopInstance("m-0", execute, slots=2)
    dispatcher = Dispatcher(
        "m", [instance], clock=SteppedClock(), planner=functools.partial(plan, policy=OneRequest()),
        lookahead=None,
    )  # fmt: skip
    futures = [
        dispatcher.enqueue(InferRequest("m", "1", [], id=rid), batch_size=1, received_ns=0)
        for rid in "abc"
    ]
    await _turns()
    assert [ids for ids, _ in execute.running] == [["a"], ["b"]]  # both in flight at once
    assert dispatcher.pending() == 2  # c waits for a slot, b behind a: neither has started
    assert execute.answer_oldest() == ["a"]
    await _turns()
    assert [ids for ids, _ in execute.running] == [["b"], ["c"]]  # c took a's slot at once
    assert dispatcher.pending() == 1  # b runs now; c is behind it
    execute.answer_oldest()
    execute.answer_oldest()
    responses = await asyncio.gather(*futures)
    assert [r.id for r in responses] == ["a", "b", "c"]
    assert execute.threads == {threading.get_ident()}  # all on the loop, no thread
    dispatcher.close()
    assert await asyncio.to_thread(instance.join, 5)  # stopped once both slots were free


async def test_a_closed_dispatcher_stops_a_loop_instance_only_after_its_last_batch() -> None:
    execute = _HeldRoundTrips()
    instance = LoopInstance("m-0", execute, slots=2)
    dispatcher = Dispatcher(
        "m", [instance], clock=SteppedClock(), planner=functools.partial(plan, policy=OneRequest()),
        lookahead=None,
    )  # fmt: skip
    future = dispatcher.enqueue(InferRequest("m", "1", [], id="a"), batch_size=1, received_ns=0)
    await _turns()
    dispatcher.close()
    assert not await asyncio.to_thread(instance.join, 0.05)  # one slot still busy
    execute.answer_oldest()
    assert (await future).id == "a"
    assert await asyncio.to_thread(instance.join, 5)


class _StubLike:
    """A backend whose execute is an awaitable round trip (as a stub process's is)."""

    gil_bound = False
    used_image = False

    def __init__(self) -> None:
        self.timings = ExecTimings()
        self.in_flight = 0
        self.most_in_flight = 0

    async def execute_async(self, requests: list[InferRequest]) -> list[InferResponse]:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        return [InferResponse("m", "1", [], id=r.id) for r in requests]

    def execute(self, requests: list[InferRequest]) -> list[InferResponse]:
        raise AssertionError("a loop-driven backend is never lent a thread")

    def load(self, ctx: object) -> None: ...
    def unload(self) -> None: ...


async def test_the_scheduler_pipelines_a_lone_round_trip_instance_and_counts_every_run() -> None:
    backend, stats = _StubLike(), ModelStats()
    scheduler = Scheduler("m", "1", [backend], stats)  # type: ignore[list-item]
    requests = [InferRequest("m", "1", [], id=str(i)) for i in range(12)]
    responses = await asyncio.gather(
        *(scheduler.submit(r, batch_size=1, received_ns=0) for r in requests)
    )
    assert [r.id for r in responses] == [r.id for r in requests]
    assert backend.most_in_flight == 8  # one instance alone: 8 single requests on their way
    assert stats.to_json("m", "1")["execution_count"] == 12
    await asyncio.to_thread(scheduler.join)


def test_an_instance_whose_loop_stopped_runs_its_next_batch_on_the_loop_that_submits_it() -> None:
    """The instance keeps the loop of its first submit (asking each time costs a system call),
    but never one that has stopped: a batch submitted from a new loop runs there."""
    execute = _HeldRoundTrips()
    instance = LoopInstance("m-0", execute, slots=1)
    done: list[tuple[list[str], int]] = []

    class _NothingWaits:
        def next_or_free(self, worker: object) -> None:
            return None

    instance.start(
        lambda worker, outcomes: done.append(
            ([str(item.request.id) for item, _ in outcomes], threading.get_ident())
        ),
        _NothingWaits(),  # type: ignore[arg-type]
    )

    async def one_batch(rid: str) -> asyncio.AbstractEventLoop:
        item = QueuedRequest(InferRequest("m", "1", [], id=rid), None, 1, 0, 0)
        instance.submit([item])
        await _turns()
        execute.answer_oldest()
        await _turns()
        return asyncio.get_running_loop()

    first = asyncio.run(one_batch("a"))
    second = asyncio.run(one_batch("b"))
    assert first is not second and first.is_closed()
    assert [ids for ids, _ in done] == [["a"], ["b"]]  # the second ran, on the second loop
