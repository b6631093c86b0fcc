"""The ensemble scheduler with a fake step runner: data flow, concurrency, one error."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from runtime.errors import InvalidInput, ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.observe.stats import ModelStats
from runtime.scheduling.ensemble_scheduler import EnsembleScheduler
from runtime.scheduling.request_parameters import SchedulingParameters
from tritonconfig import parse_config

CONFIG = """
name: "e" platform: "ensemble" max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "left" model_version: -1 input_map { key: "x" value: "IN" }
    output_map { key: "y" value: "L" } },
  { model_name: "right" model_version: -1 input_map { key: "x" value: "IN" }
    output_map { key: "y" value: "R" } },
  { model_name: "join" model_version: 2 input_map { key: "a" value: "L" }
    input_map { key: "b" value: "R" } output_map { key: "y" value: "OUT" } }
] }
"""


class _Runner:
    """left doubles, right adds 10, join adds a and b; each step takes `delay_s` (right three
    times that), a step named in `endless` until it is cancelled; a step named in `failing`
    raises InvalidInput; `cancelled` records steps cut short, `peak` the most steps running at
    once."""

    def __init__(
        self,
        delay_s: float = 0.0,
        failing: frozenset[str] = frozenset(),
        endless: frozenset[str] = frozenset(),
    ) -> None:
        self.delay_s = delay_s
        self.failing = failing
        self.endless = endless
        self.started: list[str] = []
        self.cancelled: list[str] = []
        self.versions: dict[str, str] = {}
        self.running = 0
        self.peak = 0

    async def infer(self, request: InferRequest) -> InferResponse:
        name = request.model_name
        self.started.append(name)
        self.versions[name] = request.model_version
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            if name in self.endless:
                await asyncio.Event().wait()
            await asyncio.sleep(self.delay_s if name != "right" else self.delay_s * 3)
        except asyncio.CancelledError:
            self.cancelled.append(name)
            raise
        finally:
            self.running -= 1
        if name in self.failing:
            raise InvalidInput(f"{name} refused its input")
        data = {t.name: t.data for t in request.inputs}
        if name == "left":
            out = data["x"] * 2
        elif name == "right":
            out = data["x"] + 10
        else:
            out = data["a"] + data["b"]
        return InferResponse(name, "1", [InferTensor("y", "FP32", out.shape, out)])


def _scheduler(runner: _Runner, stats: ModelStats | None = None) -> EnsembleScheduler:
    config = parse_config(CONFIG, "test")
    return EnsembleScheduler("e", "1", config, runner, stats or ModelStats())


def _request(value: float) -> InferRequest:
    data = np.array([[value]], np.float32)
    return InferRequest("e", "", [InferTensor("IN", "FP32", (1, 1), data)], id="r")


async def _submit(scheduler: EnsembleScheduler, value: float) -> InferResponse:
    return await scheduler.submit(
        _request(value), batch_size=1, received_ns=0, params=SchedulingParameters()
    )


async def test_fan_out_then_fan_in_once_both_branches_are_done() -> None:
    runner = _Runner()
    stats = ModelStats()
    response = await _submit(_scheduler(runner, stats), 3.0)
    assert response.outputs[0].name == "OUT" and response.outputs[0].data.tolist() == [[19.0]]
    assert runner.started[:2] == ["left", "right"] and runner.started[2] == "join"
    assert runner.versions == {"left": "", "right": "", "join": "2"}  # -1: latest
    assert stats.execution_count == 1 and stats.success.count == 1


async def test_independent_steps_run_at_the_same_time() -> None:
    runner = _Runner(delay_s=0.1)
    await _submit(_scheduler(runner), 1.0)
    # left (0.1 s) ran beside right (0.3 s), by count, not by a wall-clock bound (which a
    # loaded machine outlasts); join waited for both.
    assert runner.peak == 2
    assert runner.started[2] == "join"


async def test_a_failing_step_fails_once_keeps_its_status_and_cancels_the_rest() -> None:
    # right runs until cancelled: a loaded machine that stalls the loop past a finite right's
    # end would otherwise let it finish in the same turn as left fails
    runner = _Runner(delay_s=0.05, failing=frozenset({"left"}), endless=frozenset({"right"}))
    stats = ModelStats()
    with pytest.raises(ServingError) as raised:
        await _submit(_scheduler(runner, stats), 1.0)
    assert raised.value.status == 400
    assert raised.value.message == "in ensemble 'e', left refused its input"
    await asyncio.sleep(0)
    assert runner.cancelled == ["right"] and "join" not in runner.started
    assert stats.fail.count == 1 and stats.execution_count == 0
