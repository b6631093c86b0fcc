"""A replica start's own limit (`load_timeout_s`) apart from a held request's
(`activation_timeout_s`): a model whose load outlasts the activation timeout still comes up.

Stories over a fake scaler backend and a stepped clock. A held request's deadline and the
fake start's are real time (asyncio timeouts): the activation timeouts here are short, and
every wait that should end is bounded by HUNG_AFTER_S.
"""

from __future__ import annotations

import asyncio

import pytest

from activator.config import ScaleSettings
from activator.endpoint.autoscaler import Autoscaler
from activator.endpoint.model_endpoint import ModelEndpoint, ModelState
from activator.errors import ActivationFailed, HeldTimeout
from activator.observe.metrics import Metrics
from tests.fakes.clock import FakeClock
from tests.fakes.loop import HUNG_AFTER_S, eventually, settle, turns
from tests.fakes.scaler_backend import FakeScalerBackend

GRACE_S = 10.0
HELD_S = 0.5  # the activation timeout (its range's minimum): held requests get 504 then


def _endpoint(
    backend: FakeScalerBackend, clock: FakeClock, *, load_timeout_s: float = HUNG_AFTER_S
) -> ModelEndpoint:
    settings = ScaleSettings(
        max_replicas=2,
        activation_timeout_s=HELD_S,
        load_timeout_s=load_timeout_s,
        scale_to_zero_grace_s=GRACE_S,
    )
    return ModelEndpoint(
        "m", settings, backend, Metrics(), drain_timeout_s=1.0, clock=clock,
        autoscaler=Autoscaler(settings),
    )  # fmt: skip


async def _request(endpoint: ModelEndpoint) -> str:
    async with endpoint.acquire(0) as replica:
        return replica.id


async def test_a_start_that_outlasts_the_held_requests_goes_on_and_serves_the_next_ones() -> None:
    backend, clock = FakeScalerBackend(), FakeClock()
    endpoint = _endpoint(backend, clock)
    with pytest.raises(HeldTimeout) as info:
        await asyncio.wait_for(_request(endpoint), HUNG_AFTER_S)
    assert info.value.status == 504
    assert "within 0.5 s (activation_timeout_s)" in info.value.message
    assert "its start goes on" in info.value.message
    # The start was not given up with its requests: still one, still in progress.
    assert endpoint.state is ModelState.WAKING
    assert backend.starts == 1
    # A retry while it loads is held for the same start, not a second one.
    retry = asyncio.create_task(_request(endpoint))
    await settle(lambda: endpoint.held_count == 1)
    endpoint.tick()
    await turns()
    assert backend.starts == 1
    backend.gate.set()  # the model's load finishes
    assert await asyncio.wait_for(retry, HUNG_AFTER_S) == "m-1"
    assert await asyncio.wait_for(_request(endpoint), HUNG_AFTER_S) == "m-1"
    assert backend.starts == 1
    await endpoint.close()


async def test_the_autoscaler_neither_starts_another_nor_drops_the_start_after_a_504() -> None:
    backend, clock = FakeScalerBackend(), FakeClock()
    endpoint = _endpoint(backend, clock)
    with pytest.raises(HeldTimeout):
        await asyncio.wait_for(_request(endpoint), HUNG_AFTER_S)
    # Past the idle grace while the model still loads: the autoscaler wants none now, and
    # neither starts a second replica nor leaves the first one orphaned.
    clock.advance(GRACE_S + 1)
    assert endpoint.tick().desired == 0
    await turns()
    assert backend.starts == 1
    assert endpoint.running_count == 1
    backend.gate.set()
    await settle(lambda: endpoint.ready_count == 1)
    # Up with nobody asking: kept through one grace from when it became ready, for the
    # clients whose requests got the 504 to come back to.
    clock.advance(GRACE_S - 1)
    endpoint.tick()
    await turns()
    assert endpoint.ready_count == 1
    assert backend.stopped == []
    clock.advance(2)
    assert endpoint.tick().desired == 0
    await settle(lambda: backend.stopped == ["m-1"])
    assert endpoint.state is ModelState.COLD
    assert backend.starts == 1
    await endpoint.close()


async def test_the_load_call_waits_past_the_activation_timeout() -> None:
    backend, clock = FakeScalerBackend(), FakeClock()
    endpoint = _endpoint(backend, clock)
    load = asyncio.create_task(endpoint.warm())
    await backend.start_called.wait()
    await asyncio.sleep(HELD_S * 2)  # past the activation timeout: before, a 504 here
    assert not load.done()
    backend.gate.set()
    await asyncio.wait_for(load, HUNG_AFTER_S)
    assert endpoint.state is ModelState.WARM
    assert backend.starts == 1
    await endpoint.close()


async def test_a_start_past_the_load_timeout_fails_naming_the_setting() -> None:
    backend, clock = FakeScalerBackend(), FakeClock()
    endpoint = _endpoint(backend, clock, load_timeout_s=1.0)
    load = asyncio.create_task(endpoint.warm())
    await backend.start_called.wait()
    clock.advance(1.0)  # the start has run for its whole limit when it fails
    with pytest.raises((ActivationFailed, HeldTimeout)) as info:
        await asyncio.wait_for(load, HUNG_AFTER_S)
    # The start's failure and the load call's own deadline (the same limit) race: each says
    # which setting to raise.
    assert "load_timeout_s" in info.value.message
    await eventually(lambda: endpoint.last_error is not None)
    assert "`load_timeout_s` = 1 s" in (endpoint.last_error or "")
    assert "--load-timeout-s" in (endpoint.last_error or "")
    assert endpoint.state is ModelState.COLD
    await endpoint.close()


async def test_closing_does_not_wait_out_a_start_in_progress() -> None:
    backend, clock = FakeScalerBackend(), FakeClock()
    endpoint = _endpoint(backend, clock, load_timeout_s=3600)
    endpoint.expect_request()
    await backend.start_called.wait()
    await asyncio.wait_for(endpoint.close(), HUNG_AFTER_S)  # the start is cancelled
    assert endpoint.running_count == 0


def test_a_start_may_always_take_as_long_as_its_requests_are_held() -> None:
    assert ScaleSettings().start_timeout_s == 600
    slow_wake = ScaleSettings(activation_timeout_s=900, load_timeout_s=600)
    assert slow_wake.start_timeout_s == 900  # a config that raised only the old limit
