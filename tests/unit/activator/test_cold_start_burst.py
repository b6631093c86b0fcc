"""A burst at zero with default scale settings: one start, and no replicas pinned afterwards.

Stories on a stepped clock; events are ordered by event-loop turns, never by sleeping.
"""

from __future__ import annotations

import asyncio

from activator.config import ScaleSettings
from activator.endpoint.model_endpoint import ModelEndpoint, ModelState
from activator.observe.metrics import Metrics
from tests.fakes.clock import FakeClock
from tests.fakes.loop import settle, turns
from tests.fakes.scaler_backend import FakeScalerBackend


def _burst(
    endpoint: ModelEndpoint, count: int, release: asyncio.Event | None = None
) -> list[asyncio.Task[str]]:
    """`count` requests at once; each keeps its slot until `release` is set (when given)."""

    async def one() -> str:
        async with endpoint.acquire(0) as replica:
            await (release.wait() if release is not None else asyncio.sleep(0))
            return replica.id

    return [asyncio.create_task(one()) for _ in range(count)]


async def test_burst_at_zero_starts_one_replica_and_does_not_pin_more() -> None:
    backend, clock = FakeScalerBackend(), FakeClock()
    settings = ScaleSettings(activation_timeout_s=5)  # target 8, max 4: 50 held "need" 4
    endpoint = ModelEndpoint("m", settings, backend, Metrics(), clock=clock)
    tasks = _burst(endpoint, 50)
    for _ in range(4):  # the cold start spans several autoscaler ticks
        await turns()
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


async def test_the_backlog_of_a_cold_start_is_not_load_while_it_drains() -> None:
    """The replica is ready late in a tick and the 50 requests held at zero are still being
    served at the next ticks: neither their wait at zero nor the backlog itself scales the
    model up (it would read as ~40 concurrent requests: max_replicas)."""
    backend, clock = FakeScalerBackend(), FakeClock()
    settings = ScaleSettings(activation_timeout_s=5)
    endpoint = ModelEndpoint("m", settings, backend, Metrics(), clock=clock)
    release = asyncio.Event()
    tasks = _burst(endpoint, 50, release)
    await settle(lambda: endpoint.held_count == 50)
    clock.now += 0.5
    endpoint.tick()
    clock.now += 0.4  # still held, 0.4 s into the next tick
    backend.gate.set()
    await settle(lambda: endpoint.ready_count == 1)  # the replica is ready
    await turns()
    for _ in range(3):
        clock.now += 0.5
        endpoint.tick()
    assert (backend.starts, endpoint.desired) == (1, 1)
    release.set()
    assert set(await asyncio.wait_for(asyncio.gather(*tasks), 5)) == {"m-1"}
    await endpoint.close()


async def test_a_backlog_still_queued_after_the_panic_window_scales_out() -> None:
    backend, clock = FakeScalerBackend(), FakeClock()
    settings = ScaleSettings(activation_timeout_s=30, panic_window_s=2)
    endpoint = ModelEndpoint("m", settings, backend, Metrics(), clock=clock)
    release = asyncio.Event()
    tasks = _burst(endpoint, 50, release)
    await settle(lambda: endpoint.held_count == 50)
    endpoint.tick()
    backend.gate.set()
    await settle(lambda: endpoint.ready_count == 1)
    await turns()
    for _ in range(8):  # 4 s: the backlog's 2 s window is over, 34 are still held
        clock.now += 0.5
        endpoint.tick()
    assert endpoint.desired > 1
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    await endpoint.close()


async def test_min_replicas_above_one_start_together() -> None:
    backend = FakeScalerBackend()
    settings = ScaleSettings(min_replicas=2, activation_timeout_s=5)
    endpoint = ModelEndpoint("m", settings, backend, Metrics(), clock=FakeClock())
    endpoint.tick()
    await turns()
    assert backend.starts == 2
    backend.gate.set()
    await settle(lambda: endpoint.ready_count == 2)
    assert endpoint.ready_count == 2
    await endpoint.close()
