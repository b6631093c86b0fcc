"""Run a stateful model's requests: each sequence on one instance, in order, with its controls.

    submit ─▶ sequence id? START? (runtime.scheduling.sequence_table) ─▶ its instance's Dispatcher
            │    no slot free: wait in the backlog until one frees       (one worker each)
            └─ control tensors START/END/READY/CORRID added (runtime.scheduling.sequence_controls)
               implicit state in and out at execution (runtime.scheduling.sequence_state)

Triton's sequence batcher: a request must name a sequence (`sequence_id`, non-zero or
non-empty) and be of batch size 1; the first request of a sequence carries `sequence_start`.
With `iterative_sequence` (Triton's iterative sequencer, for request rescheduling) a request
without one is a sequence of its own (a new id, START); a request its model releases with
RESCHEDULE (runtime.python: `set_release_flags`) goes back to its sequence's queue, flagged
neither START nor END, until the model releases it for good, which ends its sequence.
A sequence keeps its instance and batch slot until its `sequence_end` request has executed,
or until it has been idle (no request in flight) for `max_sequence_idle_microseconds`. Each
instance has its own dispatcher, so requests of one sequence run one after another, in
arrival order. The direct strategy runs one request per slot and fills the empty slots below
the highest ready one with READY-false placeholders, as Triton does; the oldest strategy
batches the oldest requests of its instance's sequences dynamically.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from runtime.backends.base import Backend
from runtime.errors import InvalidInput, ModelErrorCancelled, ModelUnavailable
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.observe.stats import FailureReason, ModelStats
from runtime.observe.tracing import VersionTrace
from runtime.scheduling.batch_execution import BatchExecutor, Outcome, QueuedRequest
from runtime.scheduling.batch_planner import DynamicBatching, OldestSequences, SequenceSlots, plan
from runtime.scheduling.clock import Clock, LoopClock, Timer
from runtime.scheduling.dispatcher import Dispatcher, Planner
from runtime.scheduling.inline_policy import InlinePolicy
from runtime.scheduling.instance_worker import InstanceWorker
from runtime.scheduling.request_parameters import SchedulingParameters
from runtime.scheduling.sequence_controls import SequenceControls
from runtime.scheduling.sequence_state import SequenceStates
from runtime.scheduling.sequence_table import (
    Assigned,
    Backlogged,
    Refused,
    SequenceId,
    SequenceTable,
)
from tritonconfig import sequence_idle_us
from tritonconfig.schema import mc

__all__ = ["SequenceScheduler"]

logger = logging.getLogger(__name__)

_JOIN_TIMEOUT_S = 30.0
_CANCELLED = "Request was cancelled"  # a request of a sequence cancelled before it ran


class SequenceScheduler:
    """One stateful model version: its sequence table, and a dispatcher per instance."""

    def __init__(
        self,
        model: str,
        version: str,
        instances: list[Backend],
        stats: ModelStats,
        config: mc.ModelConfig,
        *,
        clock: Clock | None = None,
        trace: VersionTrace | None = None,
    ) -> None:
        self.model = model
        self.version = version
        self._clock = clock or LoopClock()
        self._closed = False
        batching = config.sequence_batching
        self._iterative = batching.iterative_sequence
        self._next_iterative = 1  # the next id given to an iterative request without one
        self._states = SequenceStates(config)
        self._oldest = batching.HasField("oldest")
        slots = max(1, config.max_batch_size)
        if self._oldest and batching.oldest.max_candidate_sequences > 0:
            slots = batching.oldest.max_candidate_sequences
        idle_us = sequence_idle_us(config) or 0
        self._config, self._slots, self._idle_ns = config, slots, idle_us * 1000
        self._table = SequenceTable(
            model=model, instances=len(instances), slots=slots, idle_ns=self._idle_ns
        )
        self._controls = SequenceControls(config)
        self._stats = stats
        self._executor = BatchExecutor(model, stats, InlinePolicy(max_inline_ns=0), trace)
        self._pad = not self._oldest and config.max_batch_size > 0
        self._backends = list(instances)
        self._workers: list[InstanceWorker] = []
        self._dispatchers = [
            self._dispatcher(i, backend, config, slots) for i, backend in enumerate(instances)
        ]
        self._next_index = len(instances)
        self._backlog: dict[SequenceId, asyncio.Future[Assigned]] = {}
        # The latest request of each sequence that waits to be queued (submit's ordering).
        self._unqueued: dict[SequenceId, asyncio.Future[None]] = {}
        self._timer: Timer | None = None
        self._timer_at = 0

    def _dispatcher(
        self, index: int, backend: Backend, config: mc.ModelConfig, slots: int
    ) -> Dispatcher:
        batching = config.sequence_batching
        policy: OldestSequences | SequenceSlots
        if self._oldest:
            oldest = batching.oldest
            policy = OldestSequences(
                DynamicBatching(
                    max_batch_size=max(1, config.max_batch_size),
                    preferred=frozenset(oldest.preferred_batch_size),
                    max_queue_delay_ns=oldest.max_queue_delay_microseconds * 1000,
                )
            )
        else:
            direct = batching.direct
            policy = SequenceSlots(
                slots=slots,
                max_queue_delay_ns=direct.max_queue_delay_microseconds * 1000,
                min_utilization=direct.minimum_slot_utilization,
            )
        run = functools.partial(self._run, backend)
        worker = InstanceWorker(f"{self.model}-v{self.version}-{index}", run)
        self._workers.append(worker)
        planner: Planner = functools.partial(plan, policy=policy)
        return Dispatcher(self.model, [worker], clock=self._clock, planner=planner, lookahead=0)

    @property
    def live_sequences(self) -> int:
        """Sequences holding a slot or waiting for one."""
        return self._table.live

    def pending(self) -> int:
        return sum(d.pending() for d in self._dispatchers)

    async def submit(
        self,
        request: InferRequest,
        *,
        batch_size: int,
        received_ns: int,
        params: SchedulingParameters,
    ) -> InferResponse:
        """Route a request to its sequence's instance and wait for its response."""
        if self._closed:
            raise ModelUnavailable(f"model '{self.model}' is unloading")
        if self._iterative and not params.in_sequence:
            params = self._own_sequence(request, params)
        sequence = self._check(params, batch_size)
        now = self._clock.now_ns()
        route = self._table.route(sequence, start=params.sequence_start, now_ns=now)
        if isinstance(route, Refused):
            raise InvalidInput(route.message)
        inputs = list(request.inputs)  # the client's: a rescheduled request starts from them
        # Requests of a sequence reach its instance's queue in the order they arrived. One that
        # must wait first (for a slot, or for an earlier request of its sequence that waits)
        # leaves a marker, done once it is queued, that the sequence's next request waits for:
        # else a request arriving just as a backlogged sequence gets its slot would be queued
        # before the sequence's earlier requests, which are still waking up (its END before
        # its START).
        earlier = self._unqueued.get(sequence)
        mine: asyncio.Future[None] | None = None
        if isinstance(route, Backlogged) or earlier is not None:
            mine = self._unqueued[sequence] = asyncio.get_running_loop().create_future()
        try:
            if isinstance(route, Backlogged):
                route = await self._backlogged(sequence, received_ns)
            if earlier is not None:
                await self._after(sequence, earlier, received_ns)
            while True:
                self._controls.add(request, params, ready=True)
                slot = route.slot if not self._oldest else sequence
                dispatcher = self._dispatchers[route.instance]
                queued = dispatcher.enqueue(
                    request, batch_size=batch_size, received_ns=received_ns, sequence=slot
                )
                if mine is not None:
                    self._queued_in_order(sequence, mine)
                    mine = None
                response = await self._queued(sequence, dispatcher, queued, received_ns)
                if not response.rescheduled:
                    return response
                sink = request.response_sink
                if sink is not None and sink.cancelled():
                    # Its client is gone (its stream closed): not run again for nobody.
                    raise ModelErrorCancelled("Request was cancelled")
                # Triton's iterative sequencer: the request goes back to its sequence's queue
                # (same instance and slot), flagged neither START nor END.
                params = self._again(request, params, inputs)
        finally:
            if mine is not None:  # never queued (refused, cancelled): the next one goes on
                self._queued_in_order(sequence, mine)
            # An iterative sequence ends with its request's release (Triton cancels it then).
            self._finished(sequence, end=params.sequence_end or self._iterative)

    def _queued_in_order(self, sequence: SequenceId, marker: asyncio.Future[None]) -> None:
        """The request that left `marker` is queued (or gone): its sequence's next may go."""
        if not marker.done():
            marker.set_result(None)
        if self._unqueued.get(sequence) is marker:
            del self._unqueued[sequence]

    # -- cancellation: a request cancelled before it ran cancels its sequence, as in Triton --

    async def _backlogged(self, sequence: SequenceId, received_ns: int) -> Assigned:
        """Wait for the backlogged `sequence`'s slot. The wait is shared by the sequence's
        requests, so one client going away must not cancel it for the others (shield): it
        cancels the sequence instead, and they are answered CANCELLED."""
        placed = self._placed(sequence)
        try:
            return await asyncio.shield(placed)
        except asyncio.CancelledError:
            self._cancelled(received_ns)
            if self._backlog.pop(sequence, None) is placed and not placed.done():
                placed.set_exception(ModelErrorCancelled(_CANCELLED))
            self._table.cancel(sequence)
            raise
        except ModelErrorCancelled:
            self._cancelled(received_ns)
            raise

    async def _after(
        self, sequence: SequenceId, earlier: asyncio.Future[None], received_ns: int
    ) -> None:
        """Wait until the sequence's earlier request is queued; this one's client going away
        meanwhile cancels the sequence, as before it ran anywhere else."""
        try:
            await asyncio.shield(earlier)
        except asyncio.CancelledError:
            self._cancelled(received_ns)
            self._table.cancel(sequence)
            raise

    async def _queued(
        self,
        sequence: SequenceId,
        dispatcher: Dispatcher,
        queued: asyncio.Future[InferResponse],
        received_ns: int,
    ) -> InferResponse:
        """A queued request's response. Its client going away before it ran cancels the
        sequence: its later queued requests are answered CANCELLED and its slot is freed once
        nothing of it is in flight (one that already runs finishes)."""
        try:
            return await queued
        except asyncio.CancelledError:
            later = dispatcher.withdraw_from(queued)
            if later is not None:
                self._cancelled(received_ns)
                self._table.cancel(sequence)
                for item in later:
                    if item.future is not None and not item.future.done():
                        item.future.set_exception(ModelErrorCancelled(_CANCELLED))
            raise
        except ModelErrorCancelled:
            self._cancelled(received_ns)
            raise

    def _cancelled(self, received_ns: int) -> None:
        self._stats.record_failure(FailureReason.CANCELED, time.perf_counter_ns() - received_ns)

    def _own_sequence(
        self, request: InferRequest, params: SchedulingParameters
    ) -> SchedulingParameters:
        """A request without a sequence id to an iterative model: a sequence of its own (a new
        id, START), as Triton's iterative sequencer gives it. An id some live sequence holds
        is skipped."""
        sequence_id = self._next_iterative
        while self._table.holds(sequence_id) is not None:
            sequence_id += 1
        self._next_iterative = sequence_id + 1
        request.parameters = {
            **request.parameters, "sequence_id": sequence_id, "sequence_start": True,
        }  # fmt: skip
        return replace(params, sequence_id=sequence_id, sequence_start=True)

    def _again(
        self, request: InferRequest, params: SchedulingParameters, inputs: list[InferTensor]
    ) -> SchedulingParameters:
        """`request`, released with RESCHEDULE, made ready to run again: its own inputs (the
        controls and state are added anew), its START and END flags cleared."""
        request.inputs = list(inputs)
        if params.sequence_start or params.sequence_end:
            request.parameters = {
                **request.parameters, "sequence_start": False, "sequence_end": False,
            }  # fmt: skip
        return replace(params, sequence_start=False, sequence_end=False)

    def _check(self, params: SchedulingParameters, batch_size: int) -> SequenceId:
        if not params.in_sequence or params.sequence_id is None:
            raise InvalidInput(
                f"inference request to model '{self.model}' must specify a non-zero or "
                "non-empty correlation ID"
            )
        if batch_size > 1:
            raise InvalidInput(
                f"inference request to model '{self.model}' must specify batch-size 1 due to "
                "requirements of sequence batcher"
            )
        self._controls.check_id(params.sequence_id)
        return params.sequence_id

    def _placed(self, sequence: SequenceId) -> asyncio.Future[Assigned]:
        """A future that resolves when the backlogged `sequence` gets its slot (shared by all
        its waiting requests, which then go on in the order they arrived)."""
        future = self._backlog.get(sequence)
        if future is None:
            future = self._backlog[sequence] = asyncio.get_running_loop().create_future()
        return future

    def _finished(self, sequence: SequenceId, *, end: bool) -> None:
        now = self._clock.now_ns()
        if end and self._iterative and self._states:
            self._states.drop(sequence)
        for placement in self._table.finished(sequence, end=end, now_ns=now):
            self._place(placement.sequence, Assigned(placement.instance, placement.slot))
        self._arm_reaper()

    def _place(self, sequence: SequenceId, route: Assigned) -> None:
        future = self._backlog.pop(sequence, None)
        if future is not None and not future.done():
            future.set_result(route)

    def _arm_reaper(self) -> None:
        """A timer at the next idle deadline (one at a time, the earliest)."""
        deadline = self._table.next_expiry()
        if deadline is None or (self._timer is not None and self._timer_at <= deadline):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = self._clock.call_at(deadline, self._reap)

    def _reap(self) -> None:
        self._timer = None
        released, placed = self._table.expire(self._clock.now_ns())
        for sequence in released:
            self._states.drop(sequence)
            logger.info("model=%s sequence %s idle too long: released", self.model, sequence)
        for placement in placed:
            self._place(placement.sequence, Assigned(placement.instance, placement.slot))
        self._arm_reaper()

    def _run(self, backend: Backend, batch: Sequence[QueuedRequest]) -> list[Outcome]:
        """Execute one batch on `backend` (its worker thread); direct: empty slots padded;
        implicit state fed in and kept."""
        if self._pad:
            batch = self._padded(batch)
        if not self._states:
            return self._executor.run(backend, batch, inline=False)
        asked = self._states.feed(batch)
        done = self._executor.run(backend, batch, inline=False)
        self._states.keep(batch, asked, done)
        return done

    def _padded(self, batch: Sequence[QueuedRequest]) -> Sequence[QueuedRequest]:
        """Slots 0..highest ready, with a READY-false placeholder in each empty one."""
        by_slot = {item.sequence: item for item in batch}
        if all(slot in by_slot for slot in range(len(batch))):
            return batch  # slots 0..n-1, in order (the planner sorts them): nothing to fill
        model = batch[0]
        out = []
        highest = max(int(item.sequence) for item in batch)  # type: ignore[call-overload]
        for slot in range(highest + 1):
            item = by_slot.get(slot)
            out.append(item if item is not None else self._filler(model, slot))
        return out

    def _filler(self, model: QueuedRequest, slot: int) -> QueuedRequest:
        """A placeholder for an empty slot: zeros shaped like a real request, READY false."""
        inputs = [
            InferTensor(t.name, t.datatype, t.shape, np.zeros_like(t.data))
            for t in model.request.inputs
            if t.name not in self._controls.names
        ]
        request = InferRequest(model.request.model_name, model.request.model_version, inputs)
        params = SchedulingParameters(sequence_id=0)
        self._controls.add(request, params, ready=False)
        now = time.perf_counter_ns()
        return QueuedRequest(request, None, 1, now, now, sequence=slot, filler=True)

    def can_update_instances(self) -> bool:
        """Whether an instance update may happen in place now: no sequence holds or waits for
        a slot (a live sequence stays on its instance; Triton keeps a removed instance until
        its sequences end, Thaw reloads the version whole then)."""
        return self._table.live == 0 and not self._backlog

    def update_instances(self, add: list[Backend], remove: list[Backend]) -> list[InstanceWorker]:
        """Triton's instance update with no live sequence (`can_update_instances`): `add`
        gets dispatchers, `remove`'s take no more and stop once idle, the rest stay. Call on
        the event loop; returns the retired workers, to join before unloading their backends."""
        gone = {id(backend) for backend in remove}
        kept = [i for i, backend in enumerate(self._backends) if id(backend) not in gone]
        retired = [i for i, backend in enumerate(self._backends) if id(backend) in gone]
        for index in retired:
            self._dispatchers[index].close()
        workers = [self._workers[i] for i in retired]
        self._backends = [self._backends[i] for i in kept]
        self._dispatchers = [self._dispatchers[i] for i in kept]
        self._workers = [self._workers[i] for i in kept]
        for backend in add:
            self._backends.append(backend)
            index, self._next_index = self._next_index, self._next_index + 1
            self._dispatchers.append(self._dispatcher(index, backend, self._config, self._slots))
        # No sequence is live: a new table over the new instances loses nothing.
        self._table = SequenceTable(
            model=self.model, instances=len(self._backends), slots=self._slots,
            idle_ns=self._idle_ns,
        )  # fmt: skip
        return workers

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for future in self._backlog.values():
            if not future.done():
                future.set_exception(ModelUnavailable(f"model '{self.model}' is unloading"))
        for dispatcher in self._dispatchers:
            dispatcher.close()

    def join(self) -> None:
        self.close()
        for dispatcher in self._dispatchers:
            dispatcher.join(_JOIN_TIMEOUT_S)
