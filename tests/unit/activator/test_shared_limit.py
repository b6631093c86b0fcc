"""A shared replica's concurrency limit counts the in-flight requests of all its models, and a
slot freed by one model's request lets another model's held request go at once; its
replica-seconds are shared out among its models in the cost view."""

from __future__ import annotations

import asyncio

import pytest

from activator.config import ScaleSettings
from activator.endpoint.breaker import Breaker
from activator.endpoint.model_endpoint import ModelEndpoint
from activator.endpoint.shared_limit import SharedLimit, SharedLimits
from activator.errors import ActivatorError
from activator.fleet.sharing import running_share
from activator.observe.metrics import Metrics
from tests.fakes.clock import FakeClock
from tests.fakes.loop import settle
from tests.fakes.scaler_backend import FakeScalerBackend

SETTINGS = ScaleSettings(max_replicas=1, activation_timeout_s=5, scale_to_zero_grace_s=10)


def test_two_models_breakers_share_one_limit_and_a_release_tells_the_listeners() -> None:
    told: list[str] = []
    limits = SharedLimits(2)
    limits.listen(lambda: told.append("freed"))
    a, b = Breaker(0, limits.for_host("h1")), Breaker(0, limits.for_host("h1"))
    other_host = Breaker(0, limits.for_host("h2"))
    assert a.try_take() and b.try_take()
    assert not a.has_capacity() and not b.try_take()  # 2 in flight on h1, whoever's they are
    assert other_host.try_take()  # another shared replica has its own limit
    assert (a.in_flight, b.in_flight) == (1, 1)
    a.release()
    assert told == ["freed"] and b.try_take()


def test_the_model_s_own_limit_still_holds_on_a_shared_replica() -> None:
    breaker = Breaker(1, SharedLimits(10).for_host("h1"))
    assert breaker.try_take() and not breaker.try_take()


def test_an_unlimited_shared_limit_tells_nobody_and_over_release_is_a_bug() -> None:
    told: list[int] = []
    limit = SharedLimit(0, [lambda: told.append(1)])
    limit.take()
    limit.release()
    assert told == []
    with pytest.raises(ActivatorError, match="more slots than were taken"):
        limit.release()
    with pytest.raises(ValueError, match="capacity = -1"):
        SharedLimits(-1)


async def test_a_held_request_of_one_model_goes_when_another_model_s_request_ends() -> None:
    backend = FakeScalerBackend(open_gate=True, host="shared-1")
    limits = SharedLimits(1)
    clock = FakeClock()
    a, b = (
        ModelEndpoint(name, SETTINGS, backend, Metrics(), clock=clock, shared_limits=limits)
        for name in ("a", "b")
    )
    await a.warm()
    await b.warm()
    release_a = asyncio.Event()

    async def use(endpoint: ModelEndpoint, until: asyncio.Event | None = None) -> str:
        async with endpoint.acquire(0) as replica:
            if until is not None:
                await until.wait()
            return replica.id

    first = asyncio.create_task(use(a, release_a))
    await settle(lambda: a.activity().in_flight == 1)
    second = asyncio.create_task(use(b))
    await settle(lambda: b.held_count == 1)  # b's replica has room of its own; the host not
    assert not second.done()
    release_a.set()
    assert await asyncio.wait_for(first, 5) == "a-1"
    assert await asyncio.wait_for(second, 5) == "b-2"
    assert b.held_count == 0
    await a.close()
    await b.close()


async def test_the_cost_view_shares_a_shared_replica_s_seconds_out_among_its_models() -> None:
    shared = ModelEndpoint("a", SETTINGS, FakeScalerBackend(open_gate=True, host="shared-1"),
                           Metrics(), clock=FakeClock())  # fmt: skip
    own = ModelEndpoint("b", SETTINGS, FakeScalerBackend(open_gate=True), Metrics(),
                        clock=FakeClock())  # fmt: skip
    await shared.warm()
    await own.warm()
    assert running_share(shared, {"shared-1": 4}) == 0.25  # one of the 4 models on it
    assert running_share(own, {"shared-1": 4}) == 1.0  # a replica of its own
    assert running_share(shared, {}) == 1.0  # no sharing backend: as before
    await shared.close()
    await own.close()
