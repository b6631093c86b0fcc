"""A model endpoint over a fake scaler backend: holding, waking, failing, draining.

Events are ordered by event-loop turns (tests.fakes.loop) and a stepped clock, never by
sleeping; only the activation-timeout test waits on real time (the timeout is real).
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from activator.config import ScaleSettings
from activator.endpoint.autoscaler import Autoscaler
from activator.endpoint.model_endpoint import ModelEndpoint, ModelState
from activator.errors import ActivationFailed, HeldTimeout, Overloaded, UnknownModel
from activator.observe.metrics import Metrics
from activator.scaler.backend import ReplicaHandle
from tests.fakes.clock import FakeClock
from tests.fakes.loop import HUNG_AFTER_S, settle, turns
from tests.fakes.scaler_backend import FakeScalerBackend

SETTINGS = ScaleSettings(
    max_replicas=1, container_concurrency=0, activation_timeout_s=5, scale_to_zero_grace_s=10
)


@pytest.fixture
def backend() -> FakeScalerBackend:
    return FakeScalerBackend()


def _endpoint(
    backend: FakeScalerBackend,
    clock: FakeClock | None = None,
    autoscaler: Autoscaler | None = None,
    **changes: float,
) -> ModelEndpoint:
    settings = dataclasses.replace(SETTINGS, **changes)  # type: ignore[arg-type]
    return ModelEndpoint(
        "m",
        settings,
        backend,
        Metrics(),
        drain_timeout_s=2.0,
        clock=clock or FakeClock(),
        autoscaler=autoscaler or Autoscaler(settings),
    )


async def _use(endpoint: ModelEndpoint, order: list[int], i: int, size: int = 0) -> str:
    async with endpoint.acquire(size) as replica:
        order.append(i)
        await asyncio.sleep(0)
        return replica.id


async def test_fifty_requests_at_zero_cause_one_start_and_all_succeed(
    backend: FakeScalerBackend,
) -> None:
    endpoint = _endpoint(backend, container_concurrency=1)
    order: list[int] = []
    tasks = [asyncio.create_task(_use(endpoint, order, i)) for i in range(50)]
    await backend.start_called.wait()
    await turns()
    assert endpoint.state is ModelState.WAKING
    assert endpoint.held_count == 50
    backend.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert backend.starts == 1
    assert set(results) == {"m-1"}
    assert order == list(range(50))  # released first in, first out
    assert endpoint.state is ModelState.WARM
    assert endpoint.last_cold_start_s is not None
    await endpoint.close()


async def test_overflow_is_refused_immediately(backend: FakeScalerBackend) -> None:
    endpoint = _endpoint(backend, max_held_requests=3)
    tasks = [asyncio.create_task(_use(endpoint, [], i)) for i in range(3)]
    await settle(lambda: endpoint.held_count == 3)
    with pytest.raises(Overloaded) as info:
        await asyncio.wait_for(_use(endpoint, [], 99), HUNG_AFTER_S)
    assert info.value.status == 503
    backend.gate.set()
    await asyncio.gather(*tasks)
    await endpoint.close()


async def test_held_bytes_bound(backend: FakeScalerBackend) -> None:
    endpoint = _endpoint(backend, max_held_bytes=1000)
    first = asyncio.create_task(_use(endpoint, [], 0, size=800))
    await settle(lambda: endpoint.held_count == 1)
    with pytest.raises(Overloaded, match="max_held_bytes"):
        await _use(endpoint, [], 1, size=300)
    backend.gate.set()
    await first
    await endpoint.close()


async def test_failed_wake_up_fails_held_requests_and_next_request_retries(
    backend: FakeScalerBackend,
) -> None:
    endpoint = _endpoint(backend)
    backend.fail_with = "model 'm' failed to load: bad weights"
    tasks = [asyncio.create_task(_use(endpoint, [], i)) for i in range(5)]
    await settle(lambda: endpoint.held_count == 5)
    backend.gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, ActivationFailed) for r in results)
    assert "bad weights" in str(results[0])
    assert backend.starts == 1
    endpoint.tick()  # ticks alone do not retry a failed model (no crash loop)
    await turns()
    assert backend.starts == 1
    backend.fail_with = None  # the model was fixed
    assert await asyncio.wait_for(_use(endpoint, [], 0), HUNG_AFTER_S) == "m-2"
    await endpoint.close()


async def test_wake_up_that_never_finishes_times_out_at_the_activation_timeout(
    backend: FakeScalerBackend,
) -> None:
    endpoint = _endpoint(backend, activation_timeout_s=0.5)
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises((HeldTimeout, ActivationFailed)) as info:
        await asyncio.wait_for(_use(endpoint, [], 0), HUNG_AFTER_S)  # answered, never hung
    assert loop.time() - start >= 0.5  # held until its deadline, not refused at once
    assert info.value.status in (503, 504)
    await endpoint.close()


async def test_client_that_disconnects_while_held_is_never_forwarded(
    backend: FakeScalerBackend,
) -> None:
    endpoint = _endpoint(backend)
    order: list[int] = []
    gone = asyncio.create_task(_use(endpoint, order, 0))
    stays = asyncio.create_task(_use(endpoint, order, 1))
    await settle(lambda: endpoint.held_count == 2)
    gone.cancel()
    await turns()
    assert endpoint.held_count == 1
    backend.gate.set()
    await stays
    assert order == [1]
    assert all(r.in_flight == 0 for r in endpoint.replicas)
    await endpoint.close()


async def test_lost_replica_leaves_rotation_and_is_replaced(backend: FakeScalerBackend) -> None:
    backend.gate.set()
    clock = FakeClock()
    autoscaler = Autoscaler(SETTINGS)
    endpoint = _endpoint(backend, clock, autoscaler)
    assert await _use(endpoint, [], 0) == "m-1"
    clock.now += 5
    autoscaler.note_request(clock.now)
    clock.now += 7  # 12 s after it became ready (no crash loop), 7 s idle (within the grace)
    backend.lose("m-1", "exit code -9")
    await settle(lambda: backend.starts == 2 and endpoint.ready_count == 1)
    assert [r.id for r in endpoint.replicas] == ["m-2"]  # recent traffic: replaced at once
    assert "m-1" in backend.stopped
    assert await _use(endpoint, [], 1) == "m-2"
    await endpoint.close()


async def test_scale_to_zero_after_grace_drains_in_flight_first(backend: FakeScalerBackend) -> None:
    backend.gate.set()
    clock = FakeClock()
    autoscaler = Autoscaler(SETTINGS)
    endpoint = _endpoint(backend, clock, autoscaler)
    await _use(endpoint, [], 0)
    clock.now += 5
    endpoint.tick()
    assert endpoint.ready_count == 1  # inside the 10 s grace
    release = asyncio.Event()

    async def long_request() -> None:
        async with endpoint.acquire(0):
            await release.wait()

    task = asyncio.create_task(long_request())
    await settle(lambda: endpoint.replicas[0].in_flight == 1)
    autoscaler.forget()  # pretend the grace passed while this one is in flight
    clock.now += 60
    endpoint.tick()
    assert endpoint.ready_count == 1  # a request in flight keeps it
    release.set()
    await task
    clock.now += 1
    endpoint.tick()  # the tick that saw the request finish
    assert endpoint.ready_count == 1
    clock.now += 9.5
    endpoint.tick()
    assert endpoint.ready_count == 1  # 9.5 s idle < 10 s grace
    clock.now += 1
    endpoint.tick()
    await settle(lambda: backend.stopped != [])
    assert endpoint.state is ModelState.COLD
    assert backend.stopped == ["m-1"]
    await endpoint.close()


async def test_drain_lets_in_flight_finish_before_stopping(backend: FakeScalerBackend) -> None:
    backend.gate.set()
    endpoint = _endpoint(backend)
    release = asyncio.Event()

    async def long_request() -> str:
        async with endpoint.acquire(0) as replica:
            await release.wait()
            return replica.id

    task = asyncio.create_task(long_request())
    await settle(lambda: endpoint.ready_count == 1 and endpoint.replicas[0].in_flight == 1)
    unload = asyncio.create_task(endpoint.scale_to_zero())
    await settle(lambda: endpoint.ready_count == 0)
    await turns()
    assert backend.stopped == []  # still draining
    assert endpoint.state is ModelState.DRAINING
    release.set()
    assert await task == "m-1"
    await asyncio.wait_for(unload, HUNG_AFTER_S)
    assert backend.stopped == ["m-1"]
    await endpoint.close()


async def test_crash_loop_does_not_restart_an_idle_model(backend: FakeScalerBackend) -> None:
    backend.gate.set()
    endpoint = _endpoint(backend, FakeClock())
    assert await _use(endpoint, [], 0) == "m-1"
    backend.lose("m-1", "exit code 1")  # died right after starting
    await settle(lambda: backend.stopped == ["m-1"])
    endpoint.tick()
    await turns()
    assert backend.starts == 1
    assert "exit code 1" in str(endpoint.last_error)
    assert await _use(endpoint, [], 1) == "m-2"  # the next request tries again


async def test_min_replicas_are_started_without_traffic_and_kept(
    backend: FakeScalerBackend,
) -> None:
    backend.gate.set()
    clock = FakeClock()
    endpoint = _endpoint(backend, clock, min_replicas=1)
    endpoint.tick()
    await settle(lambda: endpoint.ready_count == 1)
    assert endpoint.state is ModelState.WARM
    clock.now += 3600
    endpoint.tick()
    await turns()
    assert endpoint.ready_count == 1
    assert backend.stopped == []
    assert endpoint.last_cold_start_s is None  # nobody waited: not a cold start
    await endpoint.close()
    assert backend.stopped == ["m-1"]


async def test_min_replicas_only_while_loaded(backend: FakeScalerBackend) -> None:
    """Explicit model control (docs/decisions/0024): a model not loaded keeps none of its
    `min_replicas`; it gets them once loaded and drains them when unloaded."""
    backend.gate.set()
    clock, loaded = FakeClock(), [False]
    settings = dataclasses.replace(SETTINGS, min_replicas=1)
    endpoint = ModelEndpoint(
        "m", settings, backend, Metrics(), drain_timeout_s=2.0, clock=clock,
        loaded=lambda: loaded[0],
    )  # fmt: skip
    endpoint.tick()
    await turns()
    assert (endpoint.desired, backend.starts, endpoint.activity().pinned) == (0, 0, False)
    loaded[0] = True  # a load call
    endpoint.poke()
    await settle(lambda: endpoint.ready_count == 1)
    clock.now += 3600
    endpoint.tick()
    assert (endpoint.desired, endpoint.ready_count, endpoint.activity().pinned) == (1, 1, True)
    loaded[0] = False  # an unload call
    await endpoint.scale_to_zero()
    clock.now += 1
    endpoint.tick()
    await turns()
    assert (endpoint.desired, endpoint.ready_count, backend.starts) == (0, 0, 1)
    assert backend.stopped == ["m-1"]
    await endpoint.close()


async def test_an_unload_while_a_start_is_under_way_leaves_nothing_running(
    backend: FakeScalerBackend,
) -> None:
    """A request is held for a start when the model is unloaded (here, or by another
    activator): the request gets the unloaded model's refusal, and the start, once up, is
    stopped unused, not kept through the idle grace (a pod left running for nothing)."""
    clock = FakeClock()
    endpoint = _endpoint(backend, clock)
    held = asyncio.create_task(_use(endpoint, [], 0))
    await backend.start_called.wait()
    await turns()
    assert endpoint.held_count == 1
    refusal = UnknownModel("Request for unknown model: 'm' has no available versions")
    await endpoint.unload(refusal)
    with pytest.raises(UnknownModel):
        await asyncio.wait_for(held, HUNG_AFTER_S)
    backend.gate.set()  # the start ends after the unload
    await settle(lambda: backend.stopped == ["m-1"])
    endpoint.tick()
    await turns()
    assert (endpoint.desired, endpoint.ready_count, backend.starts) == (0, 0, 1)
    assert endpoint.state is ModelState.COLD
    await endpoint.close()


async def test_scale_to_zero_keeps_held_requests_for_a_start(backend: FakeScalerBackend) -> None:
    """Thaw's own scale-to-zero call keeps the model loaded: a request held meanwhile is
    served by the start under way, unlike after an unload."""
    endpoint = _endpoint(backend)
    held = asyncio.create_task(_use(endpoint, [], 0))
    await backend.start_called.wait()
    await endpoint.scale_to_zero()
    backend.gate.set()
    assert await asyncio.wait_for(held, HUNG_AFTER_S) == "m-1"
    assert backend.stopped == []
    await endpoint.close()


async def test_replicas_found_running_are_adopted_then_follow_the_load(
    backend: FakeScalerBackend,
) -> None:
    clock = FakeClock()
    backend.running["m"] = [ReplicaHandle("m-0", "m", "http://fake/m-0", 0.0, 0.0)]
    endpoint = _endpoint(backend, clock)
    await endpoint.adopt_running()
    clock.now += 5
    endpoint.tick()  # no request yet: kept through the idle grace, as after one
    assert (endpoint.state, endpoint.ready_count, backend.starts) == (ModelState.WARM, 1, 0)
    assert await _use(endpoint, [], 0) == "m-0"  # served without a start or a cold start
    assert endpoint.last_cold_start_s is None
    clock.now += 0.5
    endpoint.tick()  # the tick that saw the request
    clock.now += 10.5  # idle past the 10 s grace
    endpoint.tick()
    await settle(lambda: backend.stopped == ["m-0"])
    assert endpoint.state is ModelState.COLD
    await endpoint.close()


class CannotLook(FakeScalerBackend):
    async def running_replicas(self, model: str) -> list[ReplicaHandle]:
        raise ActivationFailed("the API server did not answer")


async def test_a_backend_that_cannot_look_for_running_replicas_starts_from_zero() -> None:
    backend = CannotLook(open_gate=True)
    endpoint = _endpoint(backend)
    await endpoint.adopt_running()
    assert endpoint.state is ModelState.COLD
    assert await _use(endpoint, [], 0) == "m-1"
    await endpoint.close()
