"""Run a model version's requests: inline when proven tiny and idle, else through the dispatcher.

    submit ─▶ idle and proven tiny (runtime.inline_policy)? ─▶ execute on the loop, instance 0
           └▶ Dispatcher (runtime.dispatcher): pending ─▶ plan ─▶ a free InstanceWorker thread

The statistics and the inline policy see every execution alike (runtime.batch_execution).
"""

from __future__ import annotations

import functools
import time

from runtime.backends.base import Backend
from runtime.batch_execution import BatchExecutor, QueuedRequest
from runtime.batch_planner import BatchPolicy, OneRequest, lookahead, plan
from runtime.clock import Clock, LoopClock
from runtime.dispatcher import Dispatcher, Planner
from runtime.errors import ModelUnavailable, ServingError
from runtime.inference import InferRequest, InferResponse
from runtime.inline_policy import InlinePolicy
from runtime.instance_worker import InstanceWorker
from runtime.stats import ModelStats

__all__ = ["Scheduler"]

# How long `join` waits for a worker to finish its current execution before giving up on it.
_JOIN_TIMEOUT_S = 30.0


class Scheduler:
    """Runs requests on `instances`, each driven by its own worker thread, batches formed by
    one dispatcher on the event loop (`policy`: today every batch is one request, in order).

    A GIL-bound backend (`Backend.gil_bound`) that has proven tiny runs on the event loop
    instead (see runtime.inline_policy), but only while no request is queued or executing, so
    an instance never runs two executions at once.
    """

    def __init__(
        self,
        model: str,
        version: str,
        instances: list[Backend],
        stats: ModelStats,
        *,
        inline_max_us: int = 0,
        policy: BatchPolicy | None = None,
        clock: Clock | None = None,
    ):
        self.model = model
        self.version = version
        self._instances = instances
        self._closed = False
        gil_bound = all(backend.gil_bound for backend in instances)
        # Observed from the workers and the loop; a race can only lose one observation.
        self._policy = InlinePolicy(max_inline_ns=inline_max_us * 1000 if gil_bound else 0)
        self._executor = BatchExecutor(model, stats, self._policy)
        workers = [
            InstanceWorker(
                f"{model}-v{version}-{i}",
                functools.partial(self._executor.run, backend, inline=False),
            )
            for i, backend in enumerate(instances)
        ]
        policy = policy or OneRequest()
        planner: Planner = functools.partial(plan, policy=policy)
        self._dispatcher = Dispatcher(
            model, workers, clock=clock or LoopClock(), planner=planner, lookahead=lookahead(policy)
        )

    def pending(self) -> int:
        """Requests accepted and not yet executing (`nv_inference_pending_request_count`)."""
        return self._dispatcher.pending()

    async def submit(
        self, request: InferRequest, *, batch_size: int, received_ns: int
    ) -> InferResponse:
        """Queue a request and wait for its response; a model error raises its ServingError."""
        if self._closed:
            raise ModelUnavailable(f"model '{self.model}' is unloading")
        if self._dispatcher.outstanding == 0 and self._policy.inline:
            # Nothing queued or executing: instance 0 is idle, and stays so while we hold the
            # loop (only the loop submits). Proven tiny: cheaper than two thread hand-offs.
            item = QueuedRequest(request, None, batch_size, received_ns, time.perf_counter_ns())
            [(_, result)] = self._executor.run(self._instances[0], [item], inline=True)
            if isinstance(result, ServingError):
                raise result
            return result
        return await self._dispatcher.enqueue(
            request, batch_size=batch_size, received_ns=received_ns
        )

    def close(self) -> None:
        """Refuse new requests; queued ones still run. Call on the event loop thread, where
        `submit` runs, so no request can slip in behind the close."""
        if self._closed:
            return
        self._closed = True
        self._dispatcher.close()

    def join(self) -> None:
        """Wait for the workers to finish the queue and exit (blocking: call from a thread).

        Closes first if nobody did (only safe for a scheduler no request can reach)."""
        self.close()
        self._dispatcher.join(_JOIN_TIMEOUT_S)
