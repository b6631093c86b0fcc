"""Execute one batch on one backend instance and account for it (statistics, inline policy)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from runtime.backends.base import AsyncExecute, Backend
from runtime.errors import ModelErrorCancelled, ServingError
from runtime.inference import InferRequest, InferResponse
from runtime.observe.stats import FailureReason, ModelStats
from runtime.observe.tracing import RequestTimes, VersionTrace
from runtime.scheduling.inline_policy import InlinePolicy

__all__ = ["BatchExecutor", "Outcome", "QueuedRequest"]

logger = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)  # identity, not field equality: the dispatcher removes by it
class QueuedRequest:
    """One accepted request and where its result goes."""

    request: InferRequest
    future: asyncio.Future[InferResponse] | None  # None when run inline, on the loop
    batch_size: int  # inferences in this request (its batch dim, or 1)
    received_ns: int  # perf_counter_ns when the server accepted it
    enqueued_ns: int  # when it was queued (the scheduler's clock: perf_counter_ns in a server)
    level: int = 0  # priority level (runtime.scheduling.queue_policy); 0 without levels
    deadline_ns: int = 0  # queue timeout on the scheduler's clock; 0: none
    delay_on_timeout: bool = False  # at the deadline: moved back (DELAY), not rejected
    shape_key: Hashable = None  # batched only with requests of an equal key
    sequence: Hashable = None  # a stateful model's batch slot or sequence id
    filler: bool = False  # a placeholder in a sequence batch slot: no client, no statistics


Outcome = tuple[QueuedRequest, InferResponse | ServingError]

_CANCELLED = "Request was cancelled"  # Triton's text; nobody reads it (the client is gone)


def _any_cancelled(batch: Sequence[QueuedRequest]) -> bool:
    """Whether any request of `batch` is cancelled (a plain loop: this runs for every batch)."""
    for item in batch:
        future = item.future
        if future is not None and future.cancelled():
            return True
    return False


def _cancelled(item: QueuedRequest) -> bool:
    """Whether nobody waits for `item` any more: its future was cancelled (any thread may ask:
    a read of the future's state, written on the loop; a cancel just after it lets it run)."""
    future = item.future
    return future is not None and future.cancelled()


class BatchExecutor:
    """Runs batches of one model version: on a worker thread, or inline on the event loop.

    A model error or crash becomes a ServingError for the requests of that batch only. Every
    execution is recorded in the version's statistics and observed by its inline policy (from
    several threads: the policy tolerates losing an observation to a race).
    """

    def __init__(
        self,
        model: str,
        stats: ModelStats,
        policy: InlinePolicy,
        trace: VersionTrace | None = None,
        *,
        skip_cancelled: bool = False,
    ) -> None:
        """`skip_cancelled`: a request whose client went away while it waited (its future
        cancelled: a gRPC cancel or deadline, a step of a cancelled ensemble) is not executed;
        it counts as a CANCELED failure, as in Triton's dynamic batcher. A sequence's requests
        are run as formed (their scheduler withdraws them from its queue itself)."""
        self.model = model
        self._stats = stats
        self._policy = policy
        self._trace = trace  # the trace extension's records (runtime.observe.tracing)
        self._skip_cancelled = skip_cancelled

    def run(
        self, backend: Backend, batch: Sequence[QueuedRequest], *, inline: bool
    ) -> list[Outcome]:
        """Execute one batch, record its statistics; a model error becomes a ServingError."""
        if self._skip_cancelled and _any_cancelled(batch):
            batch, dropped = self._drop_cancelled(batch)
            if not batch:
                return dropped
            return self.run(backend, batch, inline=inline) + dropped
        start = time.perf_counter_ns()
        try:
            results = backend.execute([item.request for item in batch])
        except BaseException as exc:  # a model must never take its worker down
            return self._account(backend, batch, self._failed(exc, len(batch)), start, inline, True)
        return self._account(backend, batch, results, start, inline)

    async def run_async(
        self,
        backend: Backend,
        execute: AsyncExecute,
        batch: Sequence[QueuedRequest],
        started: Callable[[], int],
    ) -> list[Outcome]:
        """`run` for a backend whose execute is awaited on the loop (`Backend.execute_async`).
        `started()`: when the backend began it (a pipelined batch waits for the ones ahead of
        it; that wait is queue time, not compute)."""
        if self._skip_cancelled and _any_cancelled(batch):
            batch, dropped = self._drop_cancelled(batch)
            if not batch:
                return dropped
            return await self.run_async(backend, execute, batch, started) + dropped
        sent = time.perf_counter_ns()
        try:
            results = await execute([item.request for item in batch])
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a backend bug must never take the loop instance down
            failed = self._failed(exc, len(batch))
            return self._account(backend, batch, failed, max(sent, started()), False, True)
        start = max(sent, started())
        return self._account(backend, batch, results, start, False, waited_ns=start - sent)

    def _drop_cancelled(
        self, batch: Sequence[QueuedRequest]
    ) -> tuple[list[QueuedRequest], list[Outcome]]:
        """The batch without its cancelled requests, and their outcomes (CANCELED failures;
        nobody waits for them any more)."""
        live: list[QueuedRequest] = []
        dropped: list[Outcome] = []
        now = time.perf_counter_ns()
        for item in batch:
            if _cancelled(item):
                self._stats.record_failure(FailureReason.CANCELED, max(0, now - item.received_ns))
                dropped.append((item, ModelErrorCancelled(_CANCELLED)))
            else:
                live.append(item)
        logger.debug("model=%s: %d cancelled request(s) not executed", self.model, len(dropped))
        return live, dropped

    def _failed(self, exc: BaseException, count: int) -> list[InferResponse | ServingError]:
        logger.warning("model=%s execute failed: %r", self.model, exc)
        error = (
            exc
            if isinstance(exc, ServingError)
            else ServingError(f"model '{self.model}' failed: {exc!r}")
        )
        return [error] * count

    def _account(
        self,
        backend: Backend,
        batch: Sequence[QueuedRequest],
        results: list[InferResponse | ServingError],
        start: int,
        inline: bool,
        raised: bool = False,
        *,
        waited_ns: int = 0,
    ) -> list[Outcome]:
        """Pair results with requests, record the statistics, tell the inline policy. The
        backend's own timings count unless its execute raised or miscounted."""
        measured: tuple[int, int, int] | None = None
        if len(results) != len(batch):
            results = self._failed(
                ServingError(f"backend returned {len(results)} results for {len(batch)}"),
                len(batch),
            )
        elif not raised:
            t = backend.timings
            infer_ns = max(0, t.compute_infer_ns - waited_ns)  # not the wait behind others
            measured = (t.compute_input_ns, infer_ns, t.compute_output_ns)
        end = time.perf_counter_ns()
        if measured is None or sum(measured) == 0:
            measured = (0, end - start, 0)
        if len(batch) == 1 and not batch[0].filler:  # the usual batch: one request
            item, result = batch[0], results[0]
            done = [(item, result)]
            outcome = (
                _succeeded(result),
                item.batch_size,
                start - item.enqueued_ns,
                end - item.received_ns,
            )
            self._stats.record_execution(item.batch_size, [outcome], measured)
        else:
            done = self._record(batch, results, start, end, measured)
        self._policy.observe(end - start, ran_inline=inline)
        if self._trace is not None and self._trace.active:
            self._record_traces(done, start, end, measured)
        return done

    def _record(
        self,
        batch: Sequence[QueuedRequest],
        results: list[InferResponse | ServingError],
        start: int,
        end: int,
        measured: tuple[int, int, int],
    ) -> list[Outcome]:
        """Record a batch of several requests (fillers have no client: not counted)."""
        done = [(item, result) for item, result in zip(batch, results, strict=True)]
        if any(item.filler for item in batch):
            done = [(item, result) for item, result in done if not item.filler]
        outcomes = [
            (
                _succeeded(result),
                item.batch_size,
                start - item.enqueued_ns,
                end - item.received_ns,
            )
            for item, result in done
        ]
        self._stats.record_execution(sum(i.batch_size for i, _ in done), outcomes, measured)
        return done

    def _record_traces(
        self, done: list[Outcome], start: int, end: int, measured: tuple[int, int, int]
    ) -> None:
        input_ns, _, output_ns = measured
        # The phases are measured where the model runs (a stub: another process, its own
        # reads of the clock) and may sum past this side's [start, end]: kept in order, as
        # Triton's records always are (trace_summary.py refuses an end before its start).
        input_end = min(start + input_ns, end)
        output_start = min(max(end - output_ns, input_end), end)
        finished = time.perf_counter_ns()
        assert self._trace is not None
        for item, result in done:
            times = RequestTimes(
                received_ns=item.received_ns,
                enqueued_ns=item.enqueued_ns,
                compute_start_ns=start,
                input_end_ns=input_end,
                output_start_ns=output_start,
                compute_end_ns=end,
                request_end_ns=finished,
            )
            outputs = result.outputs if isinstance(result, InferResponse) else []
            self._trace.executed(item.request, times, outputs)


def _succeeded(result: InferResponse | ServingError) -> bool:
    """Whether the statistics count the request a success: answered, or answered with an error
    response the model made itself (`from_model`: a Python model's `InferenceResponse(error=...)`,
    which Triton 2.51's python backend reports as a successful request, inference counted; an
    execute that raised, or a refusal, is a failure)."""
    return not isinstance(result, ServingError) or result.from_model
