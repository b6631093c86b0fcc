"""A model endpoint over a fake scaler backend: holding, waking, failing, draining."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from activator.config import ScaleSettings
from activator.errors import ActivationFailed, HeldTimeout, Overloaded
from activator.metrics import Metrics
from activator.model_endpoint import ModelEndpoint, ModelState
from activator.scaler.backend import StartedReplica

SETTINGS = ScaleSettings(
    max_replicas=1, container_concurrency=0, activation_timeout_s=5, scale_to_zero_grace_s=10
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeBackend:
    """Starts 'replicas' when `gate` opens; can fail starts and lose replicas."""

    def __init__(self) -> None:
        self.starts = 0
        self.gate = asyncio.Event()
        self.fail_with: str | None = None
        self.stopped: list[str] = []
        self.lost: dict[str, asyncio.Future[str]] = {}

    async def start_replica(self, model: str, *, timeout_s: float) -> StartedReplica:
        self.starts += 1
        try:
            await asyncio.wait_for(self.gate.wait(), timeout_s)
        except TimeoutError:
            raise ActivationFailed("replica did not start in time") from None
        if self.fail_with:
            raise ActivationFailed(self.fail_with)
        rid = f"{model}-{self.starts}"
        self.lost[rid] = asyncio.get_running_loop().create_future()
        return StartedReplica(rid, model, f"http://fake/{rid}", claim_s=0.01, restore_s=0.02)

    async def wait_lost(self, replica_id: str) -> str:
        return await self.lost[replica_id]

    async def stop_replica(self, replica_id: str, *, timeout_s: float) -> None:
        self.stopped.append(replica_id)

    async def close(self) -> None:
        pass


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


def _endpoint(
    backend: FakeBackend, clock: FakeClock | None = None, **changes: float
) -> ModelEndpoint:
    settings = dataclasses.replace(SETTINGS, **changes)  # type: ignore[arg-type]
    return ModelEndpoint(
        "m", settings, backend, Metrics(), drain_timeout_s=2.0, clock=clock or FakeClock()
    )


async def _use(endpoint: ModelEndpoint, order: list[int], i: int, size: int = 0) -> str:
    async with endpoint.acquire(size) as replica:
        order.append(i)
        await asyncio.sleep(0)
        return replica.id


async def test_fifty_requests_at_zero_cause_one_start_and_all_succeed(backend: FakeBackend) -> None:
    endpoint = _endpoint(backend, container_concurrency=1)
    order: list[int] = []
    tasks = [asyncio.create_task(_use(endpoint, order, i)) for i in range(50)]
    await asyncio.sleep(0.05)
    assert endpoint.state is ModelState.WAKING
    assert len(endpoint.held) == 50
    backend.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert backend.starts == 1
    assert set(results) == {"m-1"}
    assert order == list(range(50))  # released first in, first out
    assert endpoint.state is ModelState.WARM
    assert endpoint.last_cold_start_s is not None
    await endpoint.close()


async def test_overflow_is_refused_immediately(backend: FakeBackend) -> None:
    endpoint = _endpoint(backend, max_held_requests=3)
    tasks = [asyncio.create_task(_use(endpoint, [], i)) for i in range(3)]
    await asyncio.sleep(0.02)
    with pytest.raises(Overloaded) as info:
        await asyncio.wait_for(_use(endpoint, [], 99), 1)
    assert info.value.status == 503
    backend.gate.set()
    await asyncio.gather(*tasks)
    await endpoint.close()


async def test_held_bytes_bound(backend: FakeBackend) -> None:
    endpoint = _endpoint(backend, max_held_bytes=1000)
    first = asyncio.create_task(_use(endpoint, [], 0, size=800))
    await asyncio.sleep(0.02)
    with pytest.raises(Overloaded, match="max_held_bytes"):
        await _use(endpoint, [], 1, size=300)
    backend.gate.set()
    await first
    await endpoint.close()


async def test_failed_wake_up_fails_held_requests_and_next_request_retries(
    backend: FakeBackend,
) -> None:
    endpoint = _endpoint(backend)
    backend.fail_with = "model 'm' failed to load: bad weights"
    tasks = [asyncio.create_task(_use(endpoint, [], i)) for i in range(5)]
    await asyncio.sleep(0.02)
    backend.gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, ActivationFailed) for r in results)
    assert "bad weights" in str(results[0])
    assert backend.starts == 1
    endpoint.tick()  # ticks alone do not retry a failed model (no crash loop)
    await asyncio.sleep(0.02)
    assert backend.starts == 1
    backend.fail_with = None  # the model was fixed
    assert await asyncio.wait_for(_use(endpoint, [], 0), 2) == "m-2"
    await endpoint.close()


async def test_wake_up_that_never_finishes_times_out_at_the_activation_timeout(
    backend: FakeBackend,
) -> None:
    endpoint = _endpoint(backend, activation_timeout_s=0.5)
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises((HeldTimeout, ActivationFailed)) as info:
        await _use(endpoint, [], 0)
    assert loop.time() - start < 2.0
    assert info.value.status in (503, 504)
    await endpoint.close()


async def test_client_that_disconnects_while_held_is_never_forwarded(
    backend: FakeBackend,
) -> None:
    endpoint = _endpoint(backend)
    order: list[int] = []
    gone = asyncio.create_task(_use(endpoint, order, 0))
    stays = asyncio.create_task(_use(endpoint, order, 1))
    await asyncio.sleep(0.02)
    gone.cancel()
    await asyncio.sleep(0.01)
    assert len(endpoint.held) == 1
    backend.gate.set()
    await stays
    assert order == [1]
    assert all(r.in_flight == 0 for r in endpoint.replicas)
    await endpoint.close()


async def test_lost_replica_leaves_rotation_and_is_replaced(backend: FakeBackend) -> None:
    backend.gate.set()
    clock = FakeClock()
    endpoint = _endpoint(backend, clock)
    assert await _use(endpoint, [], 0) == "m-1"
    clock.now += 5
    endpoint.autoscaler.note_request(clock.now)
    clock.now += 7  # 12 s after it became ready (no crash loop), 7 s idle (within the grace)
    backend.lost["m-1"].set_result("exit code -9")
    await asyncio.sleep(0.05)
    assert [r.id for r in endpoint.replicas] == ["m-2"]  # recent traffic: replaced at once
    assert "m-1" in backend.stopped
    assert await _use(endpoint, [], 1) == "m-2"
    await endpoint.close()


async def test_scale_to_zero_after_grace_drains_in_flight_first(backend: FakeBackend) -> None:
    backend.gate.set()
    clock = FakeClock()
    endpoint = _endpoint(backend, clock)
    await _use(endpoint, [], 0)
    clock.now += 5
    endpoint.tick()
    assert endpoint.ready_count == 1  # inside the 10 s grace
    release = asyncio.Event()

    async def long_request() -> None:
        async with endpoint.acquire(0):
            await release.wait()

    task = asyncio.create_task(long_request())
    await asyncio.sleep(0.01)
    endpoint.autoscaler.forget()  # pretend the grace passed while this one is in flight
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
    await asyncio.sleep(0.05)
    assert endpoint.state is ModelState.COLD
    assert backend.stopped == ["m-1"]
    await endpoint.close()


async def test_drain_lets_in_flight_finish_before_stopping(backend: FakeBackend) -> None:
    backend.gate.set()
    endpoint = _endpoint(backend)
    release = asyncio.Event()

    async def long_request() -> str:
        async with endpoint.acquire(0) as replica:
            await release.wait()
            return replica.id

    task = asyncio.create_task(long_request())
    await asyncio.sleep(0.02)
    unload = asyncio.create_task(endpoint.scale_to_zero())
    await asyncio.sleep(0.1)
    assert backend.stopped == []  # still draining
    assert endpoint.state is ModelState.DRAINING
    release.set()
    assert await task == "m-1"
    await asyncio.wait_for(unload, 2)
    assert backend.stopped == ["m-1"]
    await endpoint.close()


async def test_crash_loop_does_not_restart_an_idle_model(backend: FakeBackend) -> None:
    backend.gate.set()
    endpoint = _endpoint(backend, FakeClock())
    assert await _use(endpoint, [], 0) == "m-1"
    backend.lost["m-1"].set_result("exit code 1")  # died right after starting
    await asyncio.sleep(0.05)
    endpoint.tick()
    await asyncio.sleep(0.05)
    assert backend.starts == 1
    assert "exit code 1" in str(endpoint.last_error)
    assert await _use(endpoint, [], 1) == "m-2"  # the next request tries again


async def test_min_replicas_are_started_without_traffic_and_kept(backend: FakeBackend) -> None:
    backend.gate.set()
    clock = FakeClock()
    endpoint = _endpoint(backend, clock, min_replicas=1)
    endpoint.tick()
    await asyncio.sleep(0.05)
    assert endpoint.state is ModelState.WARM
    clock.now += 3600
    endpoint.tick()
    await asyncio.sleep(0.05)
    assert endpoint.ready_count == 1
    assert backend.stopped == []
    assert endpoint.last_cold_start_s is None  # nobody waited: not a cold start
    await endpoint.close()
    assert backend.stopped == ["m-1"]
