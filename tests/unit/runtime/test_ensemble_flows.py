"""An ensemble request's flows with a fake step runner: a decoupled step's responses each go on
through the later steps, in the order they were made; default steps fan in within one flow."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from runtime.errors import InvalidInput
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.scheduling.ensemble_flows import EnsembleFlows
from tritonconfig import EnsembleStep


def _step(index: int, model: str, reads: dict[str, str], writes: dict[str, str]) -> EnsembleStep:
    return EnsembleStep(index, model, -1, reads, writes)


def _tensor(name: str, value: float) -> InferTensor:
    return InferTensor(name, "FP32", (1,), np.array([value], np.float32))


class _Runner:
    """`repeat` answers its input 1, 2, 3 times over (decoupled: not final, then a flag-only
    end); `slow_first` makes the first copies' later step the slowest; `add` adds its inputs;
    `fail` raises."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        self.calls.append(request.model_name)
        values = {t.name: float(t.data[0]) for t in request.inputs}
        if request.model_name == "fail":
            raise InvalidInput("no")
        if request.model_name == "repeat":
            for n in range(1, 4):
                response = InferResponse("repeat", "1", [_tensor("y", values["x"] * n)])
                response.final = False
                yield response
            end = InferResponse("repeat", "1", [])
            end.flag_only = True
            yield end
            return
        if request.model_name == "slow_first":
            await asyncio.sleep(0.05 if values["x"] < 2 * 10 else 0)
            yield InferResponse("slow_first", "1", [_tensor("y", values["x"])])
            return
        yield InferResponse("add", "1", [_tensor("y", sum(values.values()))])


def _run(steps: list[EnsembleStep], runner: _Runner, value: float) -> list[InferResponse]:
    flows = EnsembleFlows(
        "e",
        steps,
        ["OUT"],
        runner,
        lambda step, tensors: InferRequest(
            step.model_name,
            "",
            [
                InferTensor(k, tensors[v].datatype, tensors[v].shape, tensors[v].data)
                for k, v in step.input_map.items()
            ],
        ),
    )
    request = InferRequest("e", "", [_tensor("IN", value)], id="r")

    async def collect() -> list[InferResponse]:
        return [r async for r in flows.responses(request)]

    return asyncio.run(collect())


def _outs(responses: list[InferResponse]) -> list[float]:
    return [float(r.outputs[0].data[0]) for r in responses if not r.flag_only]


def test_default_steps_fan_in_to_one_final_response() -> None:
    steps = [
        _step(0, "add", {"x": "IN"}, {"y": "A"}),
        _step(1, "add", {"x": "IN"}, {"y": "B"}),
        _step(2, "add", {"a": "A", "b": "B"}, {"y": "OUT"}),
    ]
    responses = _run(steps, _Runner(), 5)
    assert _outs(responses) == [10]
    assert len(responses) == 1 and responses[0].final and responses[0].id == "r"


def test_each_decoupled_response_runs_the_later_steps_and_answers_in_order() -> None:
    runner = _Runner()
    steps = [
        _step(0, "repeat", {"x": "IN"}, {"y": "R"}),
        _step(1, "slow_first", {"x": "R"}, {"y": "OUT"}),
    ]
    responses = _run(steps, runner, 10)
    # The first copy's step is the slowest, yet its response still goes out first.
    assert _outs(responses) == [10, 20, 30]
    assert [r.final for r in responses] == [False, False, False, True]
    assert responses[-1].flag_only
    assert runner.calls.count("slow_first") == 3


def test_nested_decoupled_steps_answer_depth_first() -> None:
    steps = [
        _step(0, "repeat", {"x": "IN"}, {"y": "R"}),
        _step(1, "repeat", {"x": "R"}, {"y": "OUT"}),
    ]
    assert _outs(_run(steps, _Runner(), 1)) == [1, 2, 3, 2, 4, 6, 3, 6, 9]


def test_a_failed_step_raises_its_error() -> None:
    steps = [
        _step(0, "repeat", {"x": "IN"}, {"y": "R"}),
        _step(1, "fail", {"x": "R"}, {"y": "OUT"}),
    ]
    with pytest.raises(InvalidInput):
        _run(steps, _Runner(), 1)
