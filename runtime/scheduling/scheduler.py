"""Run a model version's requests: inline when proven tiny and idle, else through the dispatcher.

    submit ─▶ idle and proven tiny (inline_policy)? ─▶ execute on the loop, instance 0
           └▶ Dispatcher (dispatcher.py): pending ─▶ plan ─▶ a free instance: its worker
              thread (instance_worker.py), or, for a backend whose execute is an I/O round
              trip (`Backend.execute_async`, a stub process), a task on the loop
              (loop_instance.py); every module named here is in runtime.scheduling

The statistics and the inline policy see every execution alike (runtime.scheduling.batch_execution).
A model with `dynamic_batching` never runs inline: its requests wait for company in the
dispatcher under its queue policies (runtime.scheduling.batch_planner,
runtime.scheduling.queue_policy).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Hashable, Sequence

from runtime.backends.base import Backend
from runtime.errors import ModelUnavailable, ServingError
from runtime.inference import InferRequest, InferResponse
from runtime.observe.stats import FailureReason, ModelStats
from runtime.observe.tracing import VersionTrace
from runtime.scheduling.batch_execution import BatchExecutor, QueuedRequest
from runtime.scheduling.batch_planner import BatchPolicy, OneRequest, lookahead, plan
from runtime.scheduling.clock import Clock, LoopClock
from runtime.scheduling.dispatcher import Dispatcher, Planner
from runtime.scheduling.inline_policy import InlinePolicy
from runtime.scheduling.instance_worker import ExecuteFn, Instance, InstanceWorker
from runtime.scheduling.loop_instance import AsyncExecuteFn, LoopInstance
from runtime.scheduling.queue_policy import QueuePolicies
from runtime.scheduling.request_parameters import NONE, SchedulingParameters
from runtime.scheduling.resource_gate import Needs, ResourceGate

__all__ = ["Scheduler", "instance_driver"]

# How long `join` waits for a worker to finish its current execution before giving up on it.
_JOIN_TIMEOUT_S = 30.0


# Requests a loop-driven instance holds at once when batches are single requests (one running
# in the stub, the rest on their way, runtime.scheduling.loop_instance). With one instance every
# request waits for it anyway, in order, so a deep pipeline only saves round trips (a tiny model's
# answers come back in bundles); with several, a request handed early could wait behind a slow
# run on one instance while another is free, so only one more is on its way.
_PIPELINE_ALONE = 8
_PIPELINE_SHARED = 2


def instance_driver(
    name: str,
    backend: Backend,
    executor: BatchExecutor,
    *,
    slots: int = 1,
    gate: ResourceGate | None = None,
    needs: Needs | None = None,
) -> Instance:
    """What runs `backend`'s batches: tasks on the loop when its execute is an awaitable I/O
    round trip (up to `slots` batches in flight), else a worker thread of its own. With a
    `gate` and `needs`, each batch runs holding those rate-limiter resources."""
    execute_async = backend.execute_async
    if execute_async is not None:
        run: AsyncExecuteFn = functools.partial(executor.run_async, backend, execute_async)
        if gate is not None and needs:
            run = gate.holding_async(needs, run)
        return LoopInstance(name, run, slots=slots)
    run_sync: ExecuteFn = functools.partial(executor.run, backend, inline=False)
    if gate is not None and needs:
        run_sync = gate.holding(needs, run_sync)
    return InstanceWorker(name, run_sync)


class Scheduler:
    """Runs requests on `instances`, each driven by its own worker thread, batches formed by
    one dispatcher on the event loop (`policy`: one request at a time in order, or Triton's
    dynamic batcher; `queue`: its queue policies; `batch_key`: what must be equal in
    requests batched together).

    A GIL-bound backend (`Backend.gil_bound`) that has proven tiny runs on the event loop
    instead (see runtime.scheduling.inline_policy), but only while no request is queued or
    executing, so an instance never runs two executions at once.
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
        queue: QueuePolicies | None = None,
        batch_key: Callable[[InferRequest], Hashable] | None = None,
        clock: Clock | None = None,
        trace: VersionTrace | None = None,
        gate: ResourceGate | None = None,
        needs: Sequence[Needs] = (),
    ):
        """`gate` and `needs` (one per instance): the rate limiter's resources each instance
        holds while it executes (runtime.scheduling.resource_gate); none: no holding."""
        self.model = model
        self.version = version
        self._instances = instances
        self._closed = False
        self._stats = stats
        policy = policy or OneRequest()
        self._batch_key = batch_key if not isinstance(policy, OneRequest) else None
        gil_bound = all(backend.gil_bound for backend in instances)
        self._gate = gate
        if not isinstance(policy, OneRequest) or any(needs):
            # Requests wait for company in the dispatcher, or for their resources.
            inline_max_us = 0
        # Observed from the workers and the loop; a race can only lose one observation.
        self._policy = InlinePolicy(max_inline_ns=inline_max_us * 1000 if gil_bound else 0)
        self._executor = BatchExecutor(model, stats, self._policy, trace, skip_cancelled=True)
        # A batch of one cannot grow by waiting: pipelining it changes nothing but the wait.
        self._one_request = isinstance(policy, OneRequest)
        slots = 1
        if self._one_request:
            slots = _PIPELINE_ALONE if len(instances) == 1 else _PIPELINE_SHARED
        each_needs = list(needs) or [{}] * len(instances)
        workers = [
            instance_driver(
                f"{model}-v{version}-{i}",
                backend,
                self._executor,
                slots=slots,
                gate=gate,
                needs=each_needs[i],
            )
            for i, backend in enumerate(instances)
        ]
        self._drivers: dict[int, Instance] = {
            id(backend): worker for backend, worker in zip(instances, workers, strict=True)
        }
        self._next_index = len(instances)
        planner: Planner = functools.partial(plan, policy=policy)
        self._clock = clock or LoopClock()
        self._dispatcher = Dispatcher(
            model,
            workers,
            clock=self._clock,
            planner=planner,
            lookahead=lookahead(policy),
            queue=queue,
            on_rejected=self._rejected,
        )

    def pending(self) -> int:
        """Requests accepted and not yet executing (`nv_inference_pending_request_count`)."""
        return self._dispatcher.pending()

    async def submit(
        self,
        request: InferRequest,
        *,
        batch_size: int,
        received_ns: int,
        params: SchedulingParameters = NONE,
    ) -> InferResponse:
        """Queue a request and wait for its response; a model error raises its ServingError
        (a full queue or an expired timeout: ModelUnavailable, 503)."""
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
        key = self._batch_key(request) if self._batch_key is not None else None
        return await self._dispatcher.enqueue(
            request,
            batch_size=batch_size,
            received_ns=received_ns,
            priority=params.priority,
            timeout_us=params.timeout_us,
            shape_key=key,
        )

    def _rejected(self, item: QueuedRequest) -> None:
        """A request refused by a full queue or timed out in it (`nv_inference_request_failure`
        with reason REJECTED, as in Triton)."""
        elapsed = max(0, time.perf_counter_ns() - item.received_ns)
        self._stats.record_failure(FailureReason.REJECTED, elapsed)

    def can_update_instances(self) -> bool:
        """Always: any instance can be retired once its current batches are done."""
        return True

    def update_instances(
        self, add: list[Backend], remove: list[Backend], *, needs: Sequence[Needs] = ()
    ) -> list[Instance]:
        """Triton's instance update, in place: `add` starts serving at once, `remove` takes no
        new request and stops once its current ones are done; the other instances go on as they
        were (their requests, their state). Call on the event loop; returns the retired drivers,
        to join from a thread before their backends are unloaded."""
        slots = _PIPELINE_SHARED if self._one_request else 1
        added: list[Instance] = []
        each_needs = list(needs) or [{}] * len(add)
        for backend, held in zip(add, each_needs, strict=True):
            name = f"{self.model}-v{self.version}-{self._next_index}"
            self._next_index += 1
            worker = instance_driver(
                name, backend, self._executor, slots=slots, gate=self._gate, needs=held
            )
            self._drivers[id(backend)] = worker
            added.append(worker)
        gone = {id(backend) for backend in remove}
        # The inline path runs on instances[0]: a kept or new instance, never a retired one.
        self._instances = [b for b in self._instances if id(b) not in gone] + list(add)
        retired = [self._drivers.pop(key) for key in gone]
        self._dispatcher.add_workers(added)  # first: what is pending goes to them
        self._dispatcher.retire_workers(retired)
        return retired

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
