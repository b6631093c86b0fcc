"""An ensemble request's stream of responses when its steps may be decoupled: each response of
a decoupled step flows on through the steps after it on its own, as in Triton.

    flow 0 = the request's inputs
    every step whose inputs exist in a flow ─▶ StepRunner.stream (concurrently)
      its one final response     ─▶ its outputs join that flow (a step of a default model)
      each non-final response    ─▶ a new flow: a copy of that flow's tensors plus the outputs,
                                    the steps after it run again in the copy (a decoupled step)
    a flow with nothing running and no step left to start is done ─▶ one ensemble response,
    unless a decoupled step's stream was all it had left (its responses went on in copies)

Without a decoupled step there is one flow and one response, marked final. With one, every
response goes out as its flow completes, in the order of the step responses that made the flows
(a later step's copies may finish first: under `thaw up` each runs through the front door), not
final, and the request ends with Triton's flag-only final response. Steps of a flow that were
still running when a decoupled step forked it run again in the copy: each copy sees every output
it needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from runtime.inference import InferRequest, InferResponse, InferTensor
from tritonconfig import EnsembleStep

__all__ = ["EnsembleFlows", "StepStreams", "Tensors", "first_tensors", "present", "step_outputs"]


class StepStreams(Protocol):
    """Where the steps run (the stream half of ensemble_scheduler's StepRunner)."""

    def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]: ...


# An ensemble's tensors by name; None: absent, as Triton's placeholder of an optional ensemble
# input the request does not carry, or of an output a step did not return. A step runs once
# each tensor it reads exists or is absent, without the absent ones (its model refuses the
# request when one it requires is absent); an absent ensemble output is left out of the
# response (Triton 2.51, qa/L0_optional_input).
Tensors = dict[str, InferTensor | None]


def first_tensors(steps: Sequence[EnsembleStep], request: InferRequest) -> Tensors:
    """The request's inputs, and every ensemble input it does not carry as absent (validation
    let the request through, so each of those is optional)."""
    tensors: Tensors = {t.name: t for t in request.inputs}
    written = {name for step in steps for name in step.output_map.values()}
    for step in steps:
        for name in step.reads - written - tensors.keys():
            tensors[name] = None
    return tensors


def step_outputs(step: EnsembleStep, response: InferResponse) -> Tensors:
    """A step's response as the ensemble tensors its output map names, one it did not return
    absent."""
    produced = {t.name: t for t in response.outputs}
    tensors: Tensors = {}
    for model_output, tensor_name in step.output_map.items():
        out = produced.get(model_output)
        tensors[tensor_name] = (
            None if out is None else InferTensor(tensor_name, out.datatype, out.shape, out.data)
        )
    return tensors


def present(names: Sequence[str], tensors: Tensors) -> list[InferTensor]:
    """The tensors of `names` that exist, in that order (an absent one is left out)."""
    return [t for name in names if (t := tensors.get(name)) is not None]


@dataclass
class _Flow:
    tensors: Tensors
    started: set[int] = field(default_factory=set)  # steps run (or running) in this flow
    completed: set[int] = field(default_factory=set)  # steps whose outputs joined it
    running: int = 0
    order: tuple[int, ...] = ()  # its place among the request's flows: its parent's, then n
    forks: int = 0  # the copies made of it so far
    # a decoupled step's responses went on in copies of this flow (or it sent none): it is
    # done without a response of its own
    forked: bool = False


@dataclass(frozen=True)
class _Item:
    flow: _Flow
    step: EnsembleStep
    response: InferResponse | None  # None: the step's stream ended
    error: BaseException | None = None


def _after_or_above(live: tuple[int, ...], order: tuple[int, ...]) -> bool:
    """Whether nothing the live flow at `live` answers can come before the one at `order`."""
    return live > order or order[: len(live)] == live


class EnsembleFlows:
    """One ensemble request's steps over flows (see the module docstring)."""

    def __init__(
        self,
        model: str,
        steps: Sequence[EnsembleStep],
        outputs: Sequence[str],
        runner: StepStreams,
        make_request: Callable[[EnsembleStep, Tensors], InferRequest],
    ) -> None:
        self._model = model
        self._steps = steps
        self._outputs = outputs
        self._runner = runner
        self._make_request = make_request
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()
        self.decoupled = False

    async def responses(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        """Each flow's response, in the order of the step responses that made the flows; the
        last is final (a flag-only one when a step was decoupled). A failed step raises its
        error; the others are cancelled."""
        first = _Flow(first_tensors(self._steps, request))
        live: dict[tuple[int, ...], _Flow] = {first.order: first}  # flows not done
        done: list[_Flow] = []  # done flows whose responses are not out yet, in order
        ended = False  # a response marked final went out
        try:
            self._launch(first)
            self._settle(first, live, done)
            while live:
                item = await self._queue.get()
                if item.error is not None:
                    raise item.error
                for copy in self._take(item):
                    live[copy.order] = copy
                    self._launch(copy)
                    self._settle(copy, live, done)
                if not item.flow.forked:
                    self._launch(item.flow)
                self._settle(item.flow, live, done)
                # A done flow's response goes out once no flow before it can still answer:
                # flows made later from a live flow come right after it, before its later
                # siblings, so only a live flow ordered before it (not its ancestor) holds it.
                while done and all(_after_or_above(q, done[0].order) for q in live):
                    flow = done.pop(0)
                    ended = not live and not done and not self.decoupled
                    yield self._response(request, flow, final=ended)
            if not ended:
                end = InferResponse(self._model, "", [], id=request.id)
                end.flag_only = True
                yield end
        finally:
            for task in self._tasks:
                task.cancel()

    @staticmethod
    def _settle(flow: _Flow, live: dict[tuple[int, ...], _Flow], done: list[_Flow]) -> None:
        """A flow with nothing running is done (it started all it could)."""
        if flow.running or flow.order not in live:
            return
        del live[flow.order]
        if not flow.forked:
            done.append(flow)
            done.sort(key=lambda f: f.order)

    def _launch(self, flow: _Flow) -> None:
        for step in self._steps:
            if step.index in flow.started or not step.reads <= flow.tensors.keys():
                continue
            flow.started.add(step.index)
            flow.running += 1
            task = asyncio.ensure_future(self._pump(flow, step))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, flow: _Flow, step: EnsembleStep) -> None:
        request = self._make_request(step, flow.tensors)
        try:
            async for response in self._runner.stream(request):
                self._queue.put_nowait(_Item(flow, step, response.checked()))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the step's error fails the request
            self._queue.put_nowait(_Item(flow, step, None, exc))
            return
        self._queue.put_nowait(_Item(flow, step, None))

    def _take(self, item: _Item) -> list[_Flow]:
        """Apply one item to its flow; the new flows it makes."""
        flow, step, response = item.flow, item.step, item.response
        if response is None:  # the step's stream ended
            flow.running -= 1
            return []
        if response.flag_only:  # a decoupled step's end: its outputs never join this flow
            self.decoupled = True
            flow.forked = True
            return []
        outputs = step_outputs(step, response)
        if response.final and not flow.forked:
            flow.tensors.update(outputs)
            flow.completed.add(step.index)
            return []
        # A decoupled step's response: it goes on in a copy; the steps still running in
        # this flow run again there (their outputs joined only this flow).
        self.decoupled = True
        flow.forked = True
        copy = _Flow({**flow.tensors, **outputs}, order=(*flow.order, flow.forks))
        flow.forks += 1
        copy.started = flow.completed | {step.index}
        copy.completed = set(copy.started)
        return [copy]

    def _response(self, request: InferRequest, flow: _Flow, *, final: bool) -> InferResponse:
        response = InferResponse(
            self._model, "", present(self._outputs, flow.tensors), id=request.id
        )
        response.final = final
        return response
