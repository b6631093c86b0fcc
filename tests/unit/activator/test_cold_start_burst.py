"""A burst at zero with default scale settings: one start, and no replicas pinned afterwards."""

from __future__ import annotations

import asyncio

from activator.config import ScaleSettings
from activator.metrics import Metrics
from activator.model_endpoint import ModelEndpoint, ModelState
from tests.unit.activator.test_model_endpoint import FakeBackend, FakeClock


async def test_burst_at_zero_starts_one_replica_and_does_not_pin_more() -> None:
    backend, clock = FakeBackend(), FakeClock()
    settings = ScaleSettings(activation_timeout_s=5)  # target 8, max 4: 50 held "need" 4
    endpoint = ModelEndpoint("m", settings, backend, Metrics(), clock=clock)

    async def one() -> str:
        async with endpoint.acquire(0) as replica:
            await asyncio.sleep(0)
            return replica.id

    tasks = [asyncio.create_task(one()) for _ in range(50)]
    for _ in range(4):  # the cold start spans several autoscaler ticks
        await asyncio.sleep(0.01)
        clock.now += 0.5
        endpoint.tick()
    assert endpoint.state is ModelState.WAKING
    assert backend.starts == 1
    backend.gate.set()
    assert set(await asyncio.wait_for(asyncio.gather(*tasks), 5)) == {"m-1"}
    clock.now += 0.5
    endpoint.tick()
    assert backend.starts == 1
    assert endpoint.desired == 1
    await endpoint.close()


async def test_time_held_at_zero_before_the_first_ready_replica_is_not_load() -> None:
    """The replica becomes ready late in a tick: the burst's wait at zero is not counted in the
    next sample (it would read as 40 concurrent requests and scale to max_replicas)."""
    backend, clock = FakeBackend(), FakeClock()
    settings = ScaleSettings(activation_timeout_s=5)
    endpoint = ModelEndpoint("m", settings, backend, Metrics(), clock=clock)

    async def one() -> str:
        async with endpoint.acquire(0) as replica:
            await asyncio.sleep(0)
            return replica.id

    tasks = [asyncio.create_task(one()) for _ in range(50)]
    await asyncio.sleep(0.01)
    clock.now += 0.5
    endpoint.tick()
    clock.now += 0.4  # still held, 0.4 s into the next tick
    backend.gate.set()
    assert set(await asyncio.wait_for(asyncio.gather(*tasks), 5)) == {"m-1"}
    clock.now += 0.1
    endpoint.tick()
    assert backend.starts == 1
    assert endpoint.desired == 1
    await endpoint.close()


async def test_min_replicas_above_one_start_together() -> None:
    backend = FakeBackend()
    settings = ScaleSettings(min_replicas=2, activation_timeout_s=5)
    endpoint = ModelEndpoint("m", settings, backend, Metrics(), clock=FakeClock())
    endpoint.tick()
    await asyncio.sleep(0.01)
    assert backend.starts == 2
    backend.gate.set()
    await asyncio.sleep(0.05)
    assert endpoint.ready_count == 2
    await endpoint.close()
