"""Form one model version's batches centrally, on the event loop, and hand each to a free instance.

    enqueue (loop) ─▶ pending ─▶ plan(pending, now) ─▶ Take ─▶ InstancePool ─▶ a free worker
                                        │                            └─ none free: waits for
                                    WaitUntil ─▶ timer ─▶ plan again    the first to finish
    futures resolved, plan again (loop) ◀── outcomes, call_soon_threadsafe ◀── worker (thread)
                                        ◀── outcomes, directly ◀── loop instance (a task)

Every decision is made in one place, on the loop, from the whole pending queue: the planner
(runtime.scheduling.batch_planner) decides what runs and when, the dispatcher carries its decisions
out. Time comes from an injected `Clock`, so tests step it.

While every instance is busy, up to `lookahead` formed batches (None: no limit) wait in the
pool for whichever instance frees first, which starts one at once, without waiting for the
loop to see it free (on a busy loop that wait, and the GIL hand-offs around it, would leave
the instance idle between batches). A planner that waits for company to fill a batch may want
`lookahead=0`, so that batches are only formed for a free instance.

With queue policies (runtime.scheduling.queue_policy) a request is admitted to a priority level at
enqueue, or refused at once when that level's queue is full; a request whose REJECT timeout
comes while it still waits is failed at that moment (a timer at the earliest deadline), even
while every instance is busy.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Hashable, Sequence

from runtime.errors import ModelUnavailable, ServingError
from runtime.inference import InferRequest, InferResponse
from runtime.scheduling.batch_execution import Outcome, QueuedRequest
from runtime.scheduling.batch_planner import Take, WaitUntil
from runtime.scheduling.clock import Clock, Timer
from runtime.scheduling.instance_pool import InstancePool
from runtime.scheduling.instance_worker import Instance
from runtime.scheduling.queue_policy import TIMED_OUT, QueuePolicies, Refused, admit, expire

__all__ = ["Dispatcher", "Planner", "Rejected"]

logger = logging.getLogger(__name__)

# The planner with its policy bound: (pending oldest first, never empty; now_ns) -> decision.
Planner = Callable[[Sequence[QueuedRequest], int], Take[QueuedRequest] | WaitUntil]
# Told of each request refused or timed out in the queue (statistics), on the loop.
Rejected = Callable[[QueuedRequest], None]


class Dispatcher:
    """The pending requests of one model version, its instances, and the planner's timer.

    Call every method on the event loop thread (`close` also from another thread when no
    request can reach this dispatcher any more), except `pending`, which any thread may read.
    """

    def __init__(
        self,
        model: str,
        workers: Sequence[Instance],
        *,
        clock: Clock,
        planner: Planner,
        lookahead: int | None,
        queue: QueuePolicies | None = None,
        on_rejected: Rejected | None = None,
    ) -> None:
        self.model = model
        self._workers = list(workers)
        self._clock = clock
        self._planner = planner
        self._lookahead = lookahead
        self._queue = queue
        self._sized = queue is not None and queue.has_limits  # count pending per level
        self._timed = queue is not None and queue.has_timeouts  # look for expired requests
        self._on_rejected = on_rejected
        self._level_sizes: dict[int, int] = {}
        self._pending: deque[QueuedRequest] = deque()
        self._pool = InstancePool(self._workers)
        self._timer: Timer | None = None
        self._timer_deadline_ns = 0
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the server's, at first enqueue
        # Requests pending, waiting or executing; 0 means every instance is idle.
        self.outstanding = 0
        for worker in self._workers:
            worker.start(self._finished if worker.on_loop else self._done_in_worker, self._pool)

    def pending(self) -> int:
        """Requests not yet executing: pending here, in a batch waiting for an instance, or on
        their way to a pipelined instance behind the batch it runs."""
        queued = sum(worker.queued_requests for worker in self._workers)
        return len(self._pending) + self._pool.waiting_requests + queued

    def enqueue(
        self,
        request: InferRequest,
        *,
        batch_size: int,
        received_ns: int,
        priority: int = 0,
        timeout_us: int = 0,
        shape_key: Hashable = None,
        sequence: Hashable = None,
    ) -> asyncio.Future[InferResponse]:
        """Queue a request; the future gets its response, or its ServingError. A request its
        queue policy refuses (the level's queue is full) raises ModelUnavailable at once."""
        loop = self._loop
        if loop is None:  # every enqueue comes from the one server loop
            loop = self._loop = asyncio.get_running_loop()
        now = self._clock.now_ns()
        item = QueuedRequest(
            request, None, batch_size, received_ns, now, shape_key=shape_key, sequence=sequence
        )
        if self._queue is not None:
            sizes = self._level_sizes
            admitted = admit(
                sizes, priority=priority, timeout_us=timeout_us, now_ns=now, policies=self._queue
            )
            if isinstance(admitted, Refused):
                if self._on_rejected is not None:
                    self._on_rejected(item)
                raise ModelUnavailable(admitted.message)
            item.level, item.deadline_ns = admitted.level, admitted.deadline_ns
            item.delay_on_timeout = admitted.delay
            if self._sized:
                sizes[item.level] = sizes.get(item.level, 0) + 1
        future: asyncio.Future[InferResponse] = loop.create_future()
        item.future = request.completion = future
        self._pending.append(item)
        self.outstanding += 1  # back down in _finished, when a worker is done with it
        self._dispatch()
        return future

    def withdraw_from(self, future: asyncio.Future[InferResponse]) -> list[QueuedRequest] | None:
        """Take the pending request whose future is `future` out of the queue, never to run,
        with every pending request after it of the same `sequence` (a sequence cancelled at
        that request, as Triton's sequence batcher cancels it); the others are returned for
        their caller to answer. None when that request is no longer pending (it runs, or ran)."""
        pending = list(self._pending)
        first = next((i for i, item in enumerate(pending) if item.future is future), None)
        if first is None:
            return None
        sequence = pending[first].sequence
        later = [item for item in pending[first + 1 :] if item.sequence == sequence]
        self._remove([pending[first], *later])
        self.outstanding -= 1 + len(later)
        self._dispatch()  # what was planned around them may go now
        return later

    def close(self) -> None:
        """Accept nothing more (the caller stops submitting); pending requests still run, then
        each worker stops as soon as nothing is left for it."""
        self._closed = True
        self._dispatch()

    def add_workers(self, workers: Sequence[Instance]) -> None:
        """Start `workers` beside the others (an instance update); pending requests may go to
        them at once."""
        for worker in workers:
            worker.start(self._finished if worker.on_loop else self._done_in_worker, self._pool)
        self._workers.extend(workers)
        self._pool.add(workers)
        self._dispatch()

    def retire_workers(self, workers: Sequence[Instance]) -> None:
        """No new batch goes to `workers`; each stops once its current batches are done (join
        each with `Instance.join`, from a thread). The others serve what is pending."""
        for worker in workers:
            self._workers.remove(worker)
            self._pool.retire(worker)
        self._dispatch()

    def join(self, timeout_s: float) -> None:
        """Wait for every worker thread to exit (blocking: call from a thread, after `close`)."""
        for worker in self._workers:
            if not worker.join(timeout_s):
                logger.warning("model=%s worker %s did not stop in time", self.model, worker.name)

    # -- decisions (on the loop) ------------------------------------------------------------

    def _dispatch(self) -> None:
        """Hand out the planner's batches while there is an instance (or lookahead) for them."""
        pending, pool, limit = self._pending, self._pool, self._lookahead
        if self._timed and pending:
            self._reject_expired()
        while pending and (limit is None or pool.has_room(limit)):
            decision = self._planner(pending, self._clock.now_ns())
            if isinstance(decision, WaitUntil):
                self._wake_at(decision.deadline_ns)
                break
            batch = decision.items
            self._remove(batch)
            pool.hand(batch)
        if self._closed and not pending:
            # Nothing will be pending again: each free worker stops now, each busy one when it
            # finds nothing waiting (its report brings us back here).
            for worker in pool.take_free():
                worker.stop()

    def _remove(self, items: Sequence[QueuedRequest]) -> None:
        pending = self._pending
        for item in items:
            if pending[0] is item:  # the usual case: the planner takes from the front
                pending.popleft()
            else:
                pending.remove(item)
            if self._sized:
                self._level_sizes[item.level] -= 1

    def _reject_expired(self) -> None:
        """Fail the requests whose REJECT timeout has come; wake at the next deadline."""
        expiry = expire(self._pending, self._clock.now_ns())
        if expiry.rejected:
            self._remove(expiry.rejected)
            self.outstanding -= len(expiry.rejected)
            for item in expiry.rejected:
                if self._on_rejected is not None:
                    self._on_rejected(item)
                future = item.future
                if future is not None and not future.done():
                    future.set_exception(ModelUnavailable(TIMED_OUT))
        if expiry.next_deadline_ns:
            self._wake_at(expiry.next_deadline_ns)

    def _wake_at(self, deadline_ns: int) -> None:
        """Plan again at `deadline_ns`, unless a timer already fires no later."""
        if self._timer is not None:
            if self._timer_deadline_ns <= deadline_ns:
                return
            self._timer.cancel()
        self._timer_deadline_ns = deadline_ns
        self._timer = self._clock.call_at(deadline_ns, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch()

    # -- results ------------------------------------------------------------------------------

    def _done_in_worker(self, worker: Instance, outcomes: list[Outcome]) -> None:
        """A worker thread's batch is done: the rest happens on the loop, in one wake-up per batch
        (`_loop` is set: the enqueue that led to this batch set it)."""
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._finished, worker, outcomes)

    def _finished(self, worker: Instance, outcomes: list[Outcome]) -> None:
        """On the loop: deliver a batch's results (the worker already went on, or is free)."""
        self.outstanding -= len(outcomes)
        self._dispatch()  # first: an instance may have freed up for what is pending
        for item, result in outcomes:
            future = item.future
            if future is None or future.done():  # the client went away; nothing to deliver
                continue
            if isinstance(result, ServingError):
                future.set_exception(result)
            else:
                future.set_result(result)
