"""A burst at zero with default scale settings: one start, and no replicas pinned afterwards.

Stories on a stepped clock; events are ordered by event-loop turns, never by sleeping.
"""

from __future__ import annotations

import asyncio
import functools

from activator.config import ScaleSettings
from activator.endpoint.cold_start import release_cap
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


# ---- the backlog released to the replicas as they come up (cold_start.release_cap) ----------


def test_release_cap_is_the_target_per_replica_without_a_per_replica_limit() -> None:
    cap = functools.partial(release_cap, waited_s=1.0, wait_s=60.0)
    assert cap(container_concurrency=0, target_concurrency=8) == 8
    assert cap(container_concurrency=0, target_concurrency=2.5) == 3
    assert cap(container_concurrency=0, target_concurrency=0.01) == 1
    # A per-replica limit spreads the queue by itself: nothing is added to it.
    assert cap(container_concurrency=4, target_concurrency=8) is None


def test_a_queue_held_for_half_its_activation_timeout_is_released_whole() -> None:
    cap = functools.partial(release_cap, container_concurrency=0, target_concurrency=8)
    assert cap(waited_s=29.9, wait_s=60.0) == 8
    assert cap(waited_s=30.0, wait_s=60.0) is None


def _in_flight(endpoint: ModelEndpoint) -> dict[str, int]:
    return {r.id: r.in_flight for r in endpoint.replicas if r.routable}


async def test_a_burst_at_zero_is_spread_over_the_replicas_the_autoscaler_starts_for_it() -> None:
    """64 slow requests at zero (container_concurrency 0, target 8, max 4). Before, the first
    replica up took all 64 at once and the replicas started for the backlog a panic window
    later found nothing left to serve. Now it takes 8; the rest stay held, scale the model out
    once the backlog's window is over, and go to the new replicas as they come up."""
    backend, clock = FakeScalerBackend(), FakeClock()
    settings = ScaleSettings(activation_timeout_s=60, panic_window_s=2)
    endpoint = ModelEndpoint("m", settings, backend, Metrics(), clock=clock)
    release = asyncio.Event()
    tasks = _burst(endpoint, 64, release)
    await settle(lambda: endpoint.held_count == 64)
    endpoint.tick()
    backend.gate.set()
    await settle(lambda: endpoint.ready_count == 1)
    await turns()
    assert _in_flight(endpoint) == {"m-1": 8}
    assert endpoint.held_count == 56
    for _ in range(6):  # 3 s: the backlog's 2 s window is over, 56 are still held
        clock.advance(0.5)
        endpoint.tick()
    await settle(lambda: endpoint.ready_count == 4)
    await turns()
    assert backend.starts == 4
    # Every replica started for the burst has its share of it, at once.
    assert _in_flight(endpoint) == {"m-1": 8, "m-2": 8, "m-3": 8, "m-4": 8}
    assert endpoint.held_count == 32
    release.set()
    served = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert {replica: served.count(replica) for replica in set(served)} == {
        "m-1": 8 + 8, "m-2": 8 + 8, "m-3": 8 + 8, "m-4": 8 + 8,
    }  # fmt: skip
    assert endpoint.held_count == 0
    await endpoint.close()


async def test_a_burst_one_replica_absorbs_starts_no_other() -> None:
    """The backlog's requests finish within its panic window: released 8 at a time to the one
    replica, the queue is gone before it could count as load; nothing else starts."""
    backend, clock = FakeScalerBackend(), FakeClock()
    settings = ScaleSettings(activation_timeout_s=60)
    endpoint = ModelEndpoint("m", settings, backend, Metrics(), clock=clock)
    tasks = _burst(endpoint, 64)  # each request is over in one event-loop turn
    await settle(lambda: endpoint.held_count == 64)
    endpoint.tick()
    backend.gate.set()
    assert set(await asyncio.wait_for(asyncio.gather(*tasks), 5)) == {"m-1"}
    for _ in range(4):
        clock.advance(0.5)
        endpoint.tick()
    assert (backend.starts, endpoint.desired) == (1, 1)
    await endpoint.close()


async def test_with_a_per_replica_limit_the_limit_alone_spreads_the_backlog() -> None:
    backend, clock = FakeScalerBackend(), FakeClock()
    settings = ScaleSettings(activation_timeout_s=60, container_concurrency=3)
    endpoint = ModelEndpoint("m", settings, backend, Metrics(), clock=clock)
    release = asyncio.Event()
    tasks = _burst(endpoint, 20, release)
    await settle(lambda: endpoint.held_count == 20)
    endpoint.tick()
    backend.gate.set()
    await settle(lambda: endpoint.ready_count == 1)
    await turns()
    assert _in_flight(endpoint) == {"m-1": 3}  # the limit, not the target (8)
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    await endpoint.close()


async def test_a_backlog_waiting_past_half_its_timeout_goes_to_the_replicas_it_has() -> None:
    """At max_replicas, a queue that keeps waiting would meet its activation timeout (504) in
    the activator; past half of it, it is released whole to the replicas up, as before."""
    backend, clock = FakeScalerBackend(), FakeClock()
    settings = ScaleSettings(activation_timeout_s=10, max_replicas=1)
    endpoint = ModelEndpoint("m", settings, backend, Metrics(), clock=clock)
    release = asyncio.Event()
    tasks = _burst(endpoint, 20, release)
    await settle(lambda: endpoint.held_count == 20)
    endpoint.tick()
    backend.gate.set()
    await settle(lambda: endpoint.ready_count == 1)
    await turns()
    assert _in_flight(endpoint) == {"m-1": 8}
    clock.advance(4.9)
    endpoint.tick()
    assert endpoint.held_count == 12
    clock.advance(0.1)  # 5 s of the 10 s: released at the next tick
    endpoint.tick()
    assert (_in_flight(endpoint), endpoint.held_count) == ({"m-1": 20}, 0)
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    await endpoint.close()
