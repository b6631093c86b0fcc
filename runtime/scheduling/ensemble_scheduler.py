"""Run an ensemble's requests: each step as soon as the tensors it reads exist.

    submit ─▶ the steps its requested outputs need (Triton prunes the others)
              ensemble tensors = the request's inputs (an optional one it lacks: absent)
              every step whose inputs exist ─▶ StepRunner.infer (concurrently: fan-out)
              its outputs become ensemble tensors ─▶ the steps they complete (fan-in)
              ─▶ the ensemble's outputs, once no step is left to run

Steps run on other models through a `StepRunner`: the ModelManager of this server (in
`thaw serve`, the composing models are loaded beside the ensemble, as Triton loads them), or,
under `thaw up`, the platform's front door (runtime.direct.front_door), so each composing model
keeps its own replicas. The first step that fails fails the request, once, with Triton's
"in ensemble 'E', ..." text and that step's status; steps still running are cancelled. Each
step counts in its own model's statistics; the ensemble's own row counts its requests, one
execution each, with the pipeline's wall time as compute time, and a failed one as Triton's
core does, reason OTHER (whatever the step's own reason: REJECTED, BACKEND, ...).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Protocol

from runtime.errors import ModelUnavailable, ServingError
from runtime.inference import (
    InferRequest,
    InferResponse,
    InferTensor,
    RequestedOutput,
    RequestTrace,
)
from runtime.observe.stats import FailureReason, ModelStats
from runtime.scheduling.ensemble_batching import ConfigOf, TensorSides
from runtime.scheduling.ensemble_flows import (
    EnsembleFlows,
    Tensors,
    first_tensors,
    present,
    step_outputs,
)
from runtime.scheduling.request_parameters import SchedulingParameters
from tritonconfig import EnsembleStep, ensemble_steps, needed_steps
from tritonconfig.schema import mc

__all__ = ["EnsembleScheduler", "StepRunner", "sequence_echo"]


class StepRunner(Protocol):
    """Where an ensemble's steps run: validates and runs one request on a model."""

    async def infer(self, request: InferRequest) -> InferResponse: ...

    def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        """Every response of the step's model (a decoupled model's many; one otherwise)."""
        ...


class EnsembleScheduler:
    """One ensemble version: its steps and where they run."""

    def __init__(
        self,
        model: str,
        version: str,
        config: mc.ModelConfig,
        runner: StepRunner,
        stats: ModelStats,
        config_of: ConfigOf | None = None,
    ) -> None:
        """`config_of`: the composing models' configs, to pass a tensor between a batching
        and a non-batching side as Triton does (runtime.scheduling.ensemble_batching); None:
        every tensor goes on in its own shape."""
        self.model = model
        self.version = version
        self._steps = ensemble_steps(config)
        self._sides = TensorSides(config, self._steps, config_of or (lambda _name: None))
        self._outputs = [io.name for io in config.output]
        self._runner = _TracedSteps(runner)
        self._stats = stats
        self._closed = False

    def pending(self) -> int:
        return 0  # an ensemble queues nothing itself: its steps queue in their models

    async def submit(
        self,
        request: InferRequest,
        *,
        batch_size: int,
        received_ns: int,
        params: SchedulingParameters,
    ) -> InferResponse:
        if self._closed:
            raise ModelUnavailable(f"model '{self.model}' is unloading")
        start = time.perf_counter_ns()
        try:
            tensors = await self._run_steps(request, self._needed(request))
        except ServingError as exc:
            end = time.perf_counter_ns()
            self._traced(request, received_ns, start, end)
            self._stats.record_failure(FailureReason.OTHER, end - received_ns)
            raise _in_ensemble(self.model, exc) from exc
        end = time.perf_counter_ns()
        outcome = (True, batch_size, start - received_ns, end - received_ns)
        self._stats.record_execution(batch_size, [outcome], (0, end - start, 0))
        response = InferResponse(
            self.model, self.version, self._answered(present(self._outputs, tensors)),
            id=request.id,
        )  # fmt: skip
        self._traced(request, received_ns, start, end, response.outputs)
        if response.outputs:
            response.parameters = sequence_echo(params)
        return response

    async def stream(
        self,
        request: InferRequest,
        *,
        batch_size: int,
        received_ns: int,
        params: SchedulingParameters,
    ) -> AsyncIterator[InferResponse]:
        """The ensemble's responses when its steps are streamed (runtime.scheduling.
        ensemble_flows): one final response without a decoupled step, else one per flow
        and a flag-only final."""
        if self._closed:
            raise ModelUnavailable(f"model '{self.model}' is unloading")
        start = time.perf_counter_ns()
        flows = EnsembleFlows(
            self.model,
            self._needed(request),
            self._outputs,
            self._runner,
            lambda step, tensors: self._step_request(step, tensors, request),
        )
        answered: list[InferTensor] = []
        try:
            async for response in flows.responses(request):
                response.model_version = self.version
                response.outputs = self._answered(response.outputs)
                answered += response.outputs
                if response.outputs:
                    response.parameters = sequence_echo(params)
                yield response
        except ServingError as exc:
            end = time.perf_counter_ns()
            self._traced(request, received_ns, start, end)
            self._stats.record_failure(FailureReason.OTHER, end - received_ns)
            raise _in_ensemble(self.model, exc) from exc
        end = time.perf_counter_ns()
        self._traced(request, received_ns, start, end, answered)
        outcome = (True, batch_size, start - received_ns, end - received_ns)
        self._stats.record_execution(batch_size, [outcome], (0, end - start, 0))

    def _needed(self, request: InferRequest) -> list[EnsembleStep]:
        """The steps the request's requested outputs need (Triton prunes the others)."""
        requested = [output.name for output in request.requested_outputs]
        return needed_steps(self._steps, self._outputs, requested)

    def _traced(
        self,
        request: InferRequest,
        received_ns: int,
        start: int,
        end: int,
        outputs: list[InferTensor] | None = None,
    ) -> None:
        """The ensemble's own activities and tensors in its trace (its steps' are in their
        child traces, as Triton records an ensemble: no COMPUTE_*)."""
        trace = request.trace
        if trace is not None:
            activities = (("REQUEST_START", received_ns), ("QUEUE_START", start))
            trace.executed(self.version, (*activities, ("REQUEST_END", end)))
            trace.tensors("TENSOR_QUEUE_INPUT", request.inputs)
            trace.tensors("TENSOR_BACKEND_OUTPUT", outputs or [])

    async def _run_steps(self, request: InferRequest, steps: list[EnsembleStep]) -> Tensors:
        tensors = first_tensors(steps, request)
        waiting = list(steps)
        running: dict[asyncio.Task[InferResponse], EnsembleStep] = {}
        try:
            while waiting or running:
                for step in [s for s in waiting if s.reads <= tensors.keys()]:
                    waiting.remove(step)
                    step_request = self._step_request(step, tensors, request)
                    running[asyncio.ensure_future(self._runner.infer(step_request))] = step
                if not running:
                    break  # what is left can never run (validation makes this unreachable)
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    step = running.pop(task)
                    response = task.result()  # a failed step raises its error here
                    tensors.update(step_outputs(step, response))
        finally:
            for task in running:  # an error: the steps still running are of no use now
                task.cancel()
        return tensors

    def _answered(self, outputs: list[InferTensor]) -> list[InferTensor]:
        """The ensemble's outputs in the shapes it answers them in (batch or not)."""
        return [_shaped(t, self._sides.ensemble_output(t.name, t.shape)) for t in outputs]

    def _step_request(
        self, step: EnsembleStep, tensors: Tensors, request: InferRequest
    ) -> InferRequest:
        """The request for `step`, traced as a child of the ensemble's request."""
        inputs = []
        for model_input, tensor_name in step.input_map.items():
            t = tensors[tensor_name]
            if t is not None:  # absent: the step runs without it
                shape = self._sides.step_input(step.model_name, model_input, tensor_name, t.shape)
                inputs.append(_shaped(InferTensor(model_input, t.datatype, t.shape, t.data), shape))
        return InferRequest(
            model_name=step.model_name,
            model_version=str(step.model_version) if step.model_version > 0 else "",
            inputs=inputs,
            requested_outputs=[RequestedOutput(name) for name in step.output_map],
            id=request.id,
            # Sequence ids, priorities and timeouts apply to the steps, as in Triton.
            parameters={k: v for k, v in request.parameters.items() if k != "binary_data_output"},
            trace=_child_trace(request, step.model_name),
        )

    def close(self) -> None:
        self._closed = True

    def join(self) -> None:
        """Nothing to wait for: the steps run in their own models' schedulers."""
        self.close()


def _child_trace(request: InferRequest, model: str) -> RequestTrace | None:
    """A step's trace: a child of the ensemble's (Triton's `parent_id`), with its request id."""
    if request.trace is None:
        return None
    return request.trace.child(model, request.id or "")


class _TracedSteps:
    """The steps' runner, each step's child trace written once the step is done."""

    def __init__(self, runner: StepRunner) -> None:
        self._runner = runner

    async def infer(self, request: InferRequest) -> InferResponse:
        try:
            return await self._runner.infer(request)
        finally:
            if request.trace is not None:
                request.trace.end()

    async def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        try:
            async for response in self._runner.stream(request):
                yield response
        finally:
            if request.trace is not None:
                request.trace.end()


def _in_ensemble(model: str, exc: ServingError) -> ServingError:
    """A failed step's error as the ensemble's: Triton's "in ensemble 'E', " before its text,
    its HTTP status and gRPC code kept (400 stays 400; a model's CANCELLED stays CANCELLED).
    It is the ensemble's answer, never a refusal of the request (from_model), whatever its
    status: a BLS caller reads it without Triton's refusal prefix, on every replica."""
    error = ServingError(f"in ensemble '{model}', {exc.message}", from_model=True)
    error.status = exc.status
    error.grpc_code = exc.grpc_code
    return error


def _shaped(tensor: InferTensor, shape: tuple[int, ...]) -> InferTensor:
    if tuple(tensor.shape) == shape:
        return tensor
    return InferTensor(tensor.name, tensor.datatype, shape, tensor.data.reshape(shape),
                       tensor.parameters)  # fmt: skip


def sequence_echo(params: SchedulingParameters) -> dict[str, int | str | bool]:
    """The parameters every ensemble response with outputs carries in Triton 2.51 (observed):
    the request's sequence id (0 outside a sequence) and its start and end flags."""
    sequence_id = params.sequence_id if params.sequence_id is not None else 0
    return {
        "sequence_id": sequence_id,
        "sequence_start": params.sequence_start,
        "sequence_end": params.sequence_end,
    }
