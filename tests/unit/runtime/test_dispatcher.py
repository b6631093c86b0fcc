"""The dispatcher: batches formed on the loop, handed to free instances; ordering by events."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Sequence

from runtime.inference import InferRequest, InferResponse
from runtime.scheduling.batch_execution import Outcome, QueuedRequest
from runtime.scheduling.batch_planner import OneRequest, Take, WaitUntil, plan
from runtime.scheduling.dispatcher import Dispatcher, Planner
from runtime.scheduling.instance_worker import InstanceWorker
from tests.fakes.stepped_clock import SteppedClock

FIFO = functools.partial(plan, policy=OneRequest())
MS = 1_000_000


class _GatedInstance:
    """An instance whose executions record their request ids, then wait for `release`."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.started = threading.Event()  # set when an execution begins
        self.release = threading.Event()

    def __call__(self, batch: Sequence[QueuedRequest]) -> list[Outcome]:
        self.batches.append([str(item.request.id) for item in batch])
        self.started.set()
        assert self.release.wait(10), "the test never released this instance"
        return [(item, InferResponse("m", "1", [], id=item.request.id)) for item in batch]


def _request(rid: str, **parameters: int) -> InferRequest:
    return InferRequest("m", "1", [], id=rid, parameters=dict(parameters))


async def _started(instance: _GatedInstance) -> None:
    assert await asyncio.to_thread(instance.started.wait, 10)
    instance.started.clear()


def _dispatcher(
    workers: list[InstanceWorker],
    *,
    clock: SteppedClock | None = None,
    planner: Planner = FIFO,
    lookahead: int = 1,
) -> Dispatcher:
    return Dispatcher(
        "m", workers, clock=clock or SteppedClock(), planner=planner, lookahead=lookahead
    )


def _enqueue(dispatcher: Dispatcher, rid: str, **parameters: int) -> asyncio.Future[InferResponse]:
    return dispatcher.enqueue(_request(rid, **parameters), batch_size=1, received_ns=0)


async def test_one_instance_runs_requests_one_at_a_time_in_arrival_order() -> None:
    instance = _GatedInstance()
    dispatcher = _dispatcher([InstanceWorker("w0", instance)])
    futures = [_enqueue(dispatcher, rid) for rid in "abc"]
    await _started(instance)
    # Busy: the other two wait (b formed ahead, c pending); the instance runs only a.
    assert instance.batches == [["a"]] and dispatcher.pending() == 2
    assert dispatcher.outstanding == 3
    instance.release.set()
    results = await asyncio.gather(*futures)
    assert [r.id for r in results] == ["a", "b", "c"]
    assert instance.batches == [["a"], ["b"], ["c"]]
    assert dispatcher.outstanding == 0 and dispatcher.pending() == 0
    dispatcher.close()
    await asyncio.to_thread(dispatcher.join, 10)


async def test_a_pending_request_goes_to_whichever_instance_frees_first() -> None:
    first, second = _GatedInstance(), _GatedInstance()
    workers = [InstanceWorker("w0", first), InstanceWorker("w1", second)]
    dispatcher = _dispatcher(workers)
    a, b, c = (_enqueue(dispatcher, rid) for rid in "abc")
    await _started(first)
    await _started(second)  # both instances busy at once: they run in parallel
    assert dispatcher.pending() == 1
    second.release.set()
    assert (await b).id == "b" and (await c).id == "c"
    assert second.batches == [["b"], ["c"]]
    assert first.batches == [["a"]] and not a.done()  # still executing
    first.release.set()
    assert (await a).id == "a"
    dispatcher.close()
    await asyncio.to_thread(dispatcher.join, 10)


async def test_wait_until_holds_a_batch_open_until_the_clock_reaches_its_deadline() -> None:
    """A planner that holds requests 5 ms for company (a dynamic batcher's queue delay)."""

    def hold_5ms(pending: Sequence[QueuedRequest], now_ns: int) -> Take[QueuedRequest] | WaitUntil:
        deadline = pending[0].enqueued_ns + 5 * MS
        return Take(tuple(pending)) if now_ns >= deadline else WaitUntil(deadline)

    clock = SteppedClock()
    t0 = clock.now
    instance = _GatedInstance()
    instance.release.set()
    dispatcher = _dispatcher([InstanceWorker("w0", instance)], clock=clock, planner=hold_5ms)
    a = _enqueue(dispatcher, "a")
    clock.advance(2 * MS)
    b = _enqueue(dispatcher, "b")  # plans again: same deadline, still one timer
    assert clock.armed() == [t0 + 5 * MS]
    assert dispatcher.pending() == 2 and instance.batches == []
    clock.advance(3 * MS - 1)
    assert instance.batches == [] and dispatcher.pending() == 2
    clock.advance(1)  # the deadline: the timer fires, the planner takes both
    assert dispatcher.pending() == 0
    assert [r.id for r in await asyncio.gather(a, b)] == ["a", "b"]
    assert instance.batches == [["a", "b"]]
    dispatcher.close()
    await asyncio.to_thread(dispatcher.join, 10)


async def test_an_earlier_deadline_rearms_the_timer_and_a_later_one_keeps_it() -> None:
    """Per-request budgets (queue-policy timeouts, priorities): the earliest one decides."""

    def earliest_budget(
        pending: Sequence[QueuedRequest], now_ns: int
    ) -> Take[QueuedRequest] | WaitUntil:
        deadline = min(p.enqueued_ns + p.request.parameters["budget_ns"] for p in pending)
        return Take(tuple(pending)) if now_ns >= deadline else WaitUntil(deadline)

    clock = SteppedClock()
    t0 = clock.now
    instance = _GatedInstance()
    instance.release.set()
    dispatcher = _dispatcher([InstanceWorker("w0", instance)], clock=clock, planner=earliest_budget)
    futures = [_enqueue(dispatcher, "patient", budget_ns=10 * MS)]
    assert clock.armed() == [t0 + 10 * MS]
    clock.advance(1 * MS)
    futures.append(_enqueue(dispatcher, "urgent", budget_ns=1 * MS))
    assert clock.armed() == [t0 + 2 * MS]  # the 10 ms timer was cancelled
    futures.append(_enqueue(dispatcher, "late", budget_ns=50 * MS))
    assert clock.armed() == [t0 + 2 * MS]  # no second timer for a later deadline
    clock.advance(1 * MS)
    assert [r.id for r in await asyncio.gather(*futures)] == ["patient", "urgent", "late"]
    assert instance.batches == [["patient", "urgent", "late"]]
    assert clock.armed() == []
    dispatcher.close()
    await asyncio.to_thread(dispatcher.join, 10)


async def test_the_planner_may_take_any_pending_request() -> None:
    def newest_first(pending: Sequence[QueuedRequest], now_ns: int) -> Take[QueuedRequest]:
        return Take((pending[-1],))

    instance = _GatedInstance()
    # No lookahead: nothing is formed while the instance is busy, so the planner sees b and c.
    dispatcher = _dispatcher([InstanceWorker("w0", instance)], planner=newest_first, lookahead=0)
    futures = [_enqueue(dispatcher, rid) for rid in "abc"]
    await _started(instance)
    instance.release.set()
    await asyncio.gather(*futures)
    assert instance.batches == [["a"], ["c"], ["b"]]
    dispatcher.close()
    await asyncio.to_thread(dispatcher.join, 10)


async def test_close_runs_what_is_pending_and_stops_each_instance_when_it_is_free() -> None:
    busy, idle = _GatedInstance(), _GatedInstance()
    busy_worker, idle_worker = InstanceWorker("w0", busy), InstanceWorker("w1", idle)
    dispatcher = _dispatcher([busy_worker, idle_worker])
    running = _enqueue(dispatcher, "a")
    await _started(busy)
    dispatcher.close()
    # Each instance has its own stop: the idle one exits now, the busy one keeps its request.
    assert await asyncio.to_thread(idle_worker.join, 10)
    assert not running.done() and not busy_worker.join(0)
    busy.release.set()
    assert (await running).id == "a"
    assert await asyncio.to_thread(busy_worker.join, 10)
    assert idle.batches == []


async def test_requests_pending_at_close_still_run() -> None:
    instance = _GatedInstance()
    worker = InstanceWorker("w0", instance)
    dispatcher = _dispatcher([worker])
    futures = [_enqueue(dispatcher, rid) for rid in "abc"]
    await _started(instance)
    dispatcher.close()
    assert dispatcher.pending() == 2
    instance.release.set()
    assert [r.id for r in await asyncio.gather(*futures)] == ["a", "b", "c"]
    await asyncio.to_thread(dispatcher.join, 10)
    assert worker.join(0)


async def test_an_instance_starts_a_batch_formed_ahead_without_waiting_for_the_loop() -> None:
    instance = _GatedInstance()
    dispatcher = _dispatcher([InstanceWorker("w0", instance)], lookahead=1)
    a, b = _enqueue(dispatcher, "a"), _enqueue(dispatcher, "b")
    await _started(instance)  # a runs; b was formed ahead
    instance.release.set()
    # The event loop is blocked here (a synchronous wait on its thread): only the worker
    # itself can go on from a to b.
    assert instance.started.wait(10)
    assert instance.batches == [["a"], ["b"]]
    assert [r.id for r in await asyncio.gather(a, b)] == ["a", "b"]
    assert dispatcher.pending() == 0 and dispatcher.outstanding == 0
    dispatcher.close()
    await asyncio.to_thread(dispatcher.join, 10)


class _CountingInstance:
    """Executes at once; records each batch and whether it ever overlapped another."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self._running = threading.Lock()
        self.overlaps = 0

    def __call__(self, batch: Sequence[QueuedRequest]) -> list[Outcome]:
        if not self._running.acquire(blocking=False):  # another execution is under way
            self.overlaps += 1
            self._running.acquire()
        try:
            self.batches.append([str(item.request.id) for item in batch])
            return [(item, InferResponse("m", "1", [], id=item.request.id)) for item in batch]
        finally:
            self._running.release()


async def test_many_requests_on_three_instances_each_run_once_and_never_overlap() -> None:
    instances = [_CountingInstance() for _ in range(3)]
    workers = [InstanceWorker(f"w{i}", instance) for i, instance in enumerate(instances)]
    dispatcher = _dispatcher(workers, lookahead=None)
    ids = [str(i) for i in range(600)]
    futures = []
    for i, rid in enumerate(ids):
        futures.append(_enqueue(dispatcher, rid))
        if i % 50 == 0:
            await asyncio.sleep(0)  # let results in between: instances free up mid-stream
    results = await asyncio.gather(*futures)
    assert [r.id for r in results] == ids
    ran = [rid for instance in instances for batch in instance.batches for rid in batch]
    assert sorted(ran, key=int) == ids  # each exactly once
    assert all(instance.overlaps == 0 for instance in instances)
    for instance in instances:  # each instance started its requests in arrival order
        mine = [int(rid) for batch in instance.batches for rid in batch]
        assert mine == sorted(mine)
    assert dispatcher.outstanding == 0 and dispatcher.pending() == 0
    dispatcher.close()
    await asyncio.to_thread(dispatcher.join, 10)
    assert all(worker.join(0) for worker in workers)


# -- queue policies ---------------------------------------------------------------------------


def _queued_dispatcher(
    instance: _GatedInstance, clock: SteppedClock, policy_text: str, rejected: list[str]
) -> Dispatcher:
    from runtime.scheduling.batch_planner import DynamicBatching
    from runtime.scheduling.queue_policy import QueuePolicies
    from tritonconfig import parse_config

    config = parse_config(
        f'name: "m" max_batch_size: 8 dynamic_batching {{ {policy_text} }}', "test"
    )
    policy = DynamicBatching.from_config(config)
    return Dispatcher(
        "m",
        [InstanceWorker("w0", instance)],
        clock=clock,
        planner=functools.partial(plan, policy=policy),
        lookahead=0,
        queue=QueuePolicies.from_config(config.dynamic_batching),
        on_rejected=lambda item: rejected.append(str(item.request.id)),
    )


async def test_a_full_queue_refuses_at_once_with_503() -> None:
    from runtime.errors import ModelUnavailable

    clock, instance, rejected = SteppedClock(), _GatedInstance(), []
    dispatcher = _queued_dispatcher(
        instance,
        clock,
        "preferred_batch_size: [8] max_queue_delay_microseconds: 1000000 "
        "default_queue_policy { max_queue_size: 1 }",
        rejected,
    )
    first = _enqueue(dispatcher, "first")  # waits for company (1 s queue delay)
    try:
        _enqueue(dispatcher, "second")
        raise AssertionError("the second request should be refused")
    except ModelUnavailable as exc:
        assert exc.status == 503 and "Exceeds maximum queue size" in exc.message
    assert rejected == ["second"] and dispatcher.pending() == 1
    instance.release.set()
    clock.advance(1_000 * MS)  # the delay: the first goes alone
    assert (await first).id == "first"
    dispatcher.close()
    await asyncio.to_thread(dispatcher.join, 10)


async def test_a_reject_timeout_fails_at_its_deadline_while_the_instance_is_busy() -> None:
    from runtime.errors import ModelUnavailable

    clock, instance, rejected = SteppedClock(), _GatedInstance(), []
    dispatcher = _queued_dispatcher(
        instance,
        clock,
        "preferred_batch_size: [1] default_queue_policy { default_timeout_microseconds: 5000 "
        "allow_timeout_override: true }",
        rejected,
    )
    running = _enqueue(dispatcher, "running")
    await _started(instance)  # the only instance is busy until released
    patient = _enqueue(dispatcher, "patient")  # 5 ms
    hasty = dispatcher.enqueue(
        _request("hasty"), batch_size=1, received_ns=0, timeout_us=1000
    )  # 1 ms: overrides down
    clock.advance(1 * MS)
    assert hasty.done() and isinstance(hasty.exception(), ModelUnavailable)
    assert "Request timeout expired" in str(hasty.exception())
    assert not patient.done()
    clock.advance(4 * MS)  # still busy: rejected at its deadline, not when the instance frees
    assert patient.done() and isinstance(patient.exception(), ModelUnavailable)
    assert rejected == ["hasty", "patient"] and dispatcher.pending() == 0
    instance.release.set()
    assert (await running).id == "running"
    assert dispatcher.outstanding == 0
    dispatcher.close()
    await asyncio.to_thread(dispatcher.join, 10)


async def test_requests_that_queued_while_the_instance_was_busy_run_as_one_batch() -> None:
    clock, instance, rejected = SteppedClock(), _GatedInstance(), []
    dispatcher = _queued_dispatcher(instance, clock, "preferred_batch_size: [4]", rejected)
    futures = [_enqueue(dispatcher, "a")]
    await _started(instance)
    futures += [_enqueue(dispatcher, rid) for rid in "bcdef"]
    assert dispatcher.pending() == 5  # nothing formed ahead: the batch can still grow
    instance.release.set()
    results = await asyncio.gather(*futures)
    assert [r.id for r in results] == list("abcdef")
    assert instance.batches == [["a"], ["b", "c", "d", "e"], ["f"]]
    dispatcher.close()
    await asyncio.to_thread(dispatcher.join, 10)


async def test_an_instance_update_retires_a_busy_instance_after_its_batch() -> None:
    """Triton's instance update: the retired instance finishes what it runs and takes nothing
    more; the added one takes what waits, at once; the kept one goes on."""
    old, kept, new = _GatedInstance(), _GatedInstance(), _GatedInstance()
    retired, staying = InstanceWorker("w0", old), InstanceWorker("w1", kept)
    dispatcher = _dispatcher([retired, staying])
    a, b, c = (_enqueue(dispatcher, rid) for rid in "abc")
    await _started(old)
    await _started(kept)
    added = InstanceWorker("w2", new)
    dispatcher.add_workers([added])
    await _started(new)  # c, waiting for an instance, goes to the new one
    dispatcher.retire_workers([retired])
    new.release.set()
    assert (await c).id == "c"
    d = _enqueue(dispatcher, "d")
    assert (await d).id == "d" and new.batches == [["c"], ["d"]]
    old.release.set()
    assert (await a).id == "a"  # answered, and then the retired worker stops
    assert await asyncio.to_thread(retired.join, 10)
    assert old.batches == [["a"]]
    kept.release.set()
    assert (await b).id == "b"
    dispatcher.close()
    await asyncio.to_thread(dispatcher.join, 10)
