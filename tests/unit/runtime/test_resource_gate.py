"""runtime.scheduling.resource_gate: with `--rate-limit=execution_count` an instance executes
only while it holds its `rate_limiter` resources (qa/L0_model_update's rate-limit starts)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import numpy as np

from runtime.config import ModelControlMode, ServeConfig
from runtime.inference import InferRequest, InferTensor
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from runtime.scheduling.rate_limit import InstanceNeeds, RateLimitMode, ResourceLimits
from runtime.scheduling.resource_gate import ResourceGate
from tests.fixtures.models import python_model

R1 = (0, "R1")


def _gate(limit: int) -> ResourceGate:
    limits = ResourceLimits(RateLimitMode.EXECUTION_COUNT)
    limits.update("m", {R1: limit})
    return ResourceGate(limits)


async def test_an_execution_waits_until_the_resources_it_needs_are_given_back() -> None:
    gate = _gate(10)
    inside = threading.Event()
    leave = threading.Event()
    order: list[str] = []

    def blocking(name: str) -> str:
        order.append(name)
        inside.set()
        assert leave.wait(10)
        return name

    first = asyncio.ensure_future(asyncio.to_thread(gate.holding({R1: 8}, blocking), "thread"))
    assert await asyncio.to_thread(inside.wait, 10)

    async def on_loop() -> str:
        order.append("loop")
        return "loop"

    second = asyncio.ensure_future(gate.holding_async({R1: 8}, on_loop)())
    small = asyncio.ensure_future(gate.holding_async({R1: 2}, on_loop)())
    await asyncio.sleep(0.05)
    # 8 + 8 > 10: the second waits; the small one fits but comes after it (arrival order).
    assert order == ["thread"] and not second.done() and not small.done()
    leave.set()
    assert await first == "thread" and await second == "loop" and await small == "loop"
    assert order == ["thread", "loop", "loop"]


async def test_a_need_not_in_the_map_yet_is_its_own_limit() -> None:
    gate = ResourceGate(ResourceLimits(RateLimitMode.EXECUTION_COUNT))

    async def run() -> int:
        return 1

    assert await gate.holding_async({R1: 32}, run)() == 1


_TIMED_PY = """
import os
import time

import triton_python_backend_utils as pb_utils

_LOG = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(
    __file__)))), "..", "spans")


class TritonPythonModel:
    def execute(self, requests):
        start = time.monotonic()
        time.sleep(0.4)
        with open(_LOG, "a") as f:
            f.write(f"{start} {time.monotonic()}\\n")
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0")
                 .as_numpy())]
            )
            for r in requests
        ]
"""

_CONFIG = """
name: "limited"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU
                   rate_limiter { resources [ { name: "R1" count: 8 } ] } } ]
"""


async def test_two_instances_that_each_need_most_of_a_resource_run_one_at_a_time(
    tmp_path: Path,
) -> None:
    python_model(tmp_path / "repo", "limited", _CONFIG, _TIMED_PY)
    config = ServeConfig(
        repository=tmp_path / "repo",
        model_control_mode=ModelControlMode.EXPLICIT,
        rate_limit="execution_count",
        rate_limit_resources=(("R1", 10, None),),
    )
    manager = ModelManager(config, metrics=Metrics())
    await manager.start()
    try:
        await manager.load("limited")
        data = np.ones((1,), dtype=np.float32)
        request = InferRequest("limited", "", [InferTensor("INPUT0", "FP32", (1,), data)])
        other = InferRequest("limited", "", [InferTensor("INPUT0", "FP32", (1,), data)])
        await asyncio.gather(manager.infer(request), manager.infer(other))
    finally:
        await manager.stop()
    spans = sorted(
        tuple(map(float, line.split())) for line in (tmp_path / "spans").read_text().splitlines()
    )
    assert len(spans) == 2
    assert spans[1][0] >= spans[0][1]  # R1: 8 + 8 > 10: the second began once the first ended


async def test_instances_that_both_wait_take_turns_by_their_priority() -> None:
    # L0_rate_limiter's cross-model test: two instances needing all of R1, priorities 1 and 2;
    # the first should run about twice as often while both wait (Triton's scaled priority).
    gate = _gate(4)
    first, second = InstanceNeeds({R1: 4}), InstanceNeeds({R1: 4})
    second.priority = 2
    turns: list[str] = []

    async def worker(name: str, needs: InstanceNeeds) -> None:
        async def run() -> None:
            turns.append(name)
            await asyncio.sleep(0)

        gated = gate.holding_async(needs, run)
        while len(turns) < 60:
            await gated()

    await asyncio.gather(worker("p1", first), worker("p2", second))
    assert 38 <= turns[:60].count("p1") <= 42  # 2:1


def _instance(gate: ResourceGate, name: str, priority: int, turns: list[str]) -> Any:
    """One instance needing all of R1: each call is one execution, recorded in `turns`."""
    needs = InstanceNeeds({R1: 4})
    needs.priority = priority

    async def run() -> None:
        turns.append(name)
        await asyncio.sleep(0.002)

    return gate.holding_async(needs, run)


async def _busy(execute: Any, arrives_s: float, turns: list[str], n: int) -> None:
    """An instance that always has work, from `arrives_s` until `n` turns are taken."""
    await asyncio.sleep(arrives_s)
    while len(turns) < n:
        await execute()


async def test_priority_1_runs_twice_before_priority_2_from_the_start_as_in_triton() -> None:
    # Triton 2.51, L0_rate_limiter's two models (priority 1 and 2, one resource between them),
    # seen here: AAB AAB ..., and BAAAAB AAB ... when B came first by a little; with
    # `executions x priority` the first turns alternated (ABAB AAB ...) and the test's ratio
    # fell under its 1.8.
    for b_early_s, expected in ((0.0, "AABAABAAB"), (0.001, "BAAAABAAB")):
        gate, turns = _gate(4), list[str]()
        a, b = _instance(gate, "A", 1, turns), _instance(gate, "B", 2, turns)
        await asyncio.gather(_busy(a, b_early_s, turns, 9), _busy(b, 0.0, turns, 9))
        assert "".join(turns[:9]) == expected


async def test_an_instance_that_ran_alone_gives_way_until_the_other_catches_up() -> None:
    # Triton: B (priority 2) ran 3 times alone, then A (priority 1) came: 8 A's, then AAB.
    gate, turns = _gate(4), list[str]()
    a, b = _instance(gate, "A", 1, turns), _instance(gate, "B", 2, turns)
    for _ in range(3):
        await b()
    await asyncio.gather(_busy(a, 0.0, turns, 17), _busy(b, 0.0, turns, 17))
    assert "".join(turns[:17]) == "BBB" + "AAAAAAAA" + "BAAB" + "AA"


async def test_a_thread_and_a_loop_waiter_are_served_by_rank_not_arrival() -> None:
    gate = _gate(4)
    leave = asyncio.Event()
    order: list[str] = []

    async def hold() -> None:
        await leave.wait()

    async def on_loop(name: str) -> None:
        order.append(name)

    low = InstanceNeeds({R1: 4})
    low.priority = 3
    low_run = gate.holding_async(low, on_loop)
    await low_run("warm-up")  # has run once: rank 3 now
    holder = asyncio.ensure_future(gate.holding_async(InstanceNeeds({R1: 4}), hold)())
    await asyncio.sleep(0.05)  # past the low one's reservation: the holder has R1
    first = asyncio.ensure_future(low_run("low"))
    await asyncio.sleep(0.01)
    high = asyncio.ensure_future(
        asyncio.to_thread(gate.holding(InstanceNeeds({R1: 4}), order.append), "thread")
    )
    await asyncio.sleep(0.05)
    leave.set()
    await asyncio.gather(holder, first, high)
    assert order == ["warm-up", "thread", "low"]  # rank 0 before rank 3, though it came later


async def test_what_a_first_ranked_instance_gave_back_goes_on_when_it_does_not_return() -> None:
    limits = ResourceLimits(RateLimitMode.EXECUTION_COUNT)
    limits.update("m", {R1: 4})
    gate = ResourceGate(limits, restage_s=0.01)
    low = InstanceNeeds({R1: 4})
    low.priority = 3
    order: list[str] = []

    async def record(name: str) -> None:
        order.append(name)

    low_run = gate.holding_async(low, record)
    await low_run("low")  # rank 3 from now on
    leave = asyncio.Event()

    async def hold(name: str) -> None:
        order.append(name)
        await leave.wait()

    holder = asyncio.ensure_future(gate.holding_async(InstanceNeeds({R1: 4}), hold)("first"))
    await asyncio.sleep(0.01)
    waiting = asyncio.ensure_future(low_run("low again"))
    await asyncio.sleep(0.01)
    leave.set()  # the first (rank 1 after its turn, before the waiter's 3) gives R1 back
    await holder
    await asyncio.wait_for(waiting, timeout=5)  # served once the 10 ms reservation lapses
    assert order == ["low", "first", "low again"]
