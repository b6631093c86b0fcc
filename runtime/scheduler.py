"""Run a model version's requests on its instances: one queue, a thread per instance."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass

from runtime.backends.base import Backend
from runtime.errors import ModelUnavailable, ServingError
from runtime.inference import InferRequest, InferResponse
from runtime.inline_policy import InlinePolicy
from runtime.stats import ModelStats

__all__ = ["Scheduler"]

logger = logging.getLogger(__name__)

# How long `stop` waits for a worker to finish its current execution before giving up on it.
_JOIN_TIMEOUT_S = 30.0


@dataclass(slots=True)
class _Item:
    """One queued request and where its result goes."""

    request: InferRequest
    future: asyncio.Future[InferResponse] | None  # None when run inline, on the loop
    batch_size: int  # inferences in this request (its batch dim, or 1)
    received_ns: int  # perf_counter_ns when the server accepted it
    enqueued_ns: int


class Scheduler:
    """FIFO scheduler over `instances`; each instance is driven by its own worker thread.

    A GIL-bound backend (`Backend.gil_bound`) that has proven tiny runs on the event loop
    instead (see runtime.inline_policy), but only while no request is queued or executing, so
    an instance never runs two executions at once. Dynamic batching plugs in at `_take_batch`:
    today a batch is one request.
    """

    def __init__(
        self,
        model: str,
        version: str,
        instances: list[Backend],
        stats: ModelStats,
        *,
        inline_max_us: int = 0,
    ):
        self.model = model
        self.version = version
        self._instances = instances
        self._stats = stats
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._closed = False
        gil_bound = all(getattr(backend, "gil_bound", False) for backend in instances)
        # Observed from the workers and the loop; a race can only lose one observation.
        self._policy = InlinePolicy(max_inline_ns=inline_max_us * 1000 if gil_bound else 0)
        # Requests queued or executing in a worker; read and written on the event loop only.
        self._outstanding = 0
        self._loop: asyncio.AbstractEventLoop | None = None  # the server's, at first submit
        self._threads = [
            threading.Thread(
                target=self._work, args=(backend,), name=f"{model}-v{version}-{i}", daemon=True
            )
            for i, backend in enumerate(instances)
        ]
        for thread in self._threads:
            thread.start()

    def pending(self) -> int:
        """Requests waiting in the queue (not yet handed to an instance)."""
        return self._queue.qsize()

    async def submit(
        self, request: InferRequest, *, batch_size: int, received_ns: int
    ) -> InferResponse:
        """Queue a request and wait for its response; a model error raises its ServingError."""
        if self._closed:
            raise ModelUnavailable(f"model '{self.model}' is unloading")
        if self._outstanding == 0 and self._policy.inline:
            # Nothing queued or executing: instance 0 is idle, and stays so while we hold the
            # loop (only the loop submits). Proven tiny: cheaper than two thread hand-offs.
            item = _Item(request, None, batch_size, received_ns, time.perf_counter_ns())
            [(_, result)] = self._run(self._instances[0], [item], inline=True)
            if isinstance(result, ServingError):
                raise result
            return result
        loop = self._loop
        if loop is None:  # every submit comes from the one server loop
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[InferResponse] = loop.create_future()
        item = _Item(request, future, batch_size, received_ns, time.perf_counter_ns())
        self._outstanding += 1  # back down in _resolve, when a worker is done with it
        self._queue.put(item)
        return await future

    def close(self) -> None:
        """Refuse new requests; queued ones still run. Call on the event loop thread, where
        `submit` runs, so no request can slip in behind the stop markers."""
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)

    def join(self) -> None:
        """Wait for the workers to finish the queue and exit (blocking: call from a thread).

        Closes first if nobody did (only safe for a scheduler no request can reach)."""
        self.close()
        for thread in self._threads:
            thread.join(_JOIN_TIMEOUT_S)
            if thread.is_alive():
                logger.warning("model=%s worker %s did not stop in time", self.model, thread.name)

    def _take_batch(self, first: _Item) -> list[_Item]:
        """The requests to execute together; the dynamic batcher will gather more here."""
        return [first]

    def _work(self, backend: Backend) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = self._take_batch(item)
            pairs = self._run(backend, batch, inline=False)
            # One wake-up of the event loop per batch, not per request. (`_loop` is set: the
            # submit that queued this batch set it.)
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._resolve, pairs)

    def _run(
        self, backend: Backend, batch: list[_Item], *, inline: bool
    ) -> list[tuple[_Item, InferResponse | ServingError]]:
        """Execute one batch, record its statistics; a model error becomes a ServingError."""
        start = time.perf_counter_ns()
        measured: tuple[int, int, int] | None = None
        try:
            results = backend.execute([item.request for item in batch])
            if len(results) != len(batch):
                raise ServingError(f"backend returned {len(results)} results for {len(batch)}")
            t = backend.timings
            measured = (t.compute_input_ns, t.compute_infer_ns, t.compute_output_ns)
        except BaseException as exc:  # a model must never take its worker down
            logger.warning("model=%s execute failed: %r", self.model, exc)
            error = (
                exc
                if isinstance(exc, ServingError)
                else ServingError(f"model '{self.model}' failed: {exc!r}")
            )
            results = [error] * len(batch)
        end = time.perf_counter_ns()
        if measured is None or sum(measured) == 0:
            measured = (0, end - start, 0)
        outcomes = [
            (
                not isinstance(result, ServingError),
                item.batch_size,
                start - item.enqueued_ns,
                end - item.received_ns,
            )
            for item, result in zip(batch, results, strict=True)
        ]
        self._stats.record_execution(sum(i.batch_size for i in batch), outcomes, measured)
        self._policy.observe(end - start, ran_inline=inline)
        return list(zip(batch, results, strict=True))

    def _resolve(self, pairs: list[tuple[_Item, InferResponse | ServingError]]) -> None:
        """Deliver a batch's results (on the event loop)."""
        self._outstanding -= len(pairs)
        for item, result in pairs:
            future = item.future
            if future is None or future.done():  # the client went away; nothing to deliver
                continue
            if isinstance(result, ServingError):
                future.set_exception(result)
            else:
                future.set_result(result)
