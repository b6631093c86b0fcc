"""The reconciler's peer-concurrency hook: another activator's load counts in this one's
decisions, and demand appearing there wakes this one at once (a fake PeerConcurrency, a
stepped clock)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from activator.config import ScaleSettings
from activator.endpoint.autoscaler import Autoscaler
from activator.endpoint.model_endpoint import ModelEndpoint
from activator.observe.metrics import Metrics
from activator.scaler.backend import PeerConcurrency, PeerLoad
from tests.fakes.clock import FakeClock
from tests.fakes.loop import turns
from tests.fakes.scaler_backend import FakeScalerBackend

SETTINGS = ScaleSettings(max_replicas=10, target_concurrency=10, scale_to_zero_grace_s=30)


class PeeredBackend(FakeScalerBackend):
    """A fake backend whose other activators hold `others` of the model."""

    def __init__(self) -> None:
        super().__init__(open_gate=True)
        self.others = PeerLoad()
        self.reported: list[tuple[float, int]] = []
        self.wakers: list[Callable[[], object]] = []
        self.forgotten: list[str] = []

    def exchange(self, model: str, *, mean: float, current: int) -> PeerLoad:
        self.reported.append((mean, current))
        return self.others

    def watch_demand(self, model: str, wake: Callable[[], object]) -> None:
        self.wakers.append(wake)

    def forget_demand(self, model: str) -> None:
        self.forgotten.append(model)
        self.others = PeerLoad()  # the leader's table without the model's reports


def _endpoint(backend: PeeredBackend, clock: FakeClock) -> ModelEndpoint:
    return ModelEndpoint(
        "m", SETTINGS, backend, Metrics(), clock=clock, autoscaler=Autoscaler(SETTINGS)
    )


async def test_demand_held_on_another_activator_wakes_this_one_and_starts_a_replica() -> None:
    backend, clock = PeeredBackend(), FakeClock()
    assert isinstance(backend, PeerConcurrency)
    endpoint = _endpoint(backend, clock)
    assert endpoint.tick().desired == 0  # nothing anywhere
    backend.others = PeerLoad(mean=0.0, current=3)  # three requests held elsewhere
    (wake,) = backend.wakers
    wake()
    assert endpoint.desired == 1  # at once, not at the next tick
    await turns()
    assert backend.starts == 1 and endpoint.ready_count == 1
    await endpoint.close()


async def test_peer_demand_keeps_the_model_through_the_idle_grace() -> None:
    # Issue 21, defect 3: a request held only on another activator wakes this one (the
    # scaling leader); that request is served 0.2 s later. The model must then stay up for
    # its idle grace, as after a request of its own, not go back to zero at the next tick.
    backend, clock = PeeredBackend(), FakeClock()
    endpoint = _endpoint(backend, clock)
    backend.others = PeerLoad(mean=0.0, current=1)
    (wake,) = backend.wakers
    wake()
    await turns()
    assert endpoint.ready_count == 1
    clock.advance(0.2)
    backend.others = PeerLoad()  # served there: its report now says nothing held
    assert endpoint.tick().desired == 1
    await turns()
    assert endpoint.ready_count == 1 and backend.stopped == []
    clock.advance(SETTINGS.scale_to_zero_grace_s)
    assert endpoint.tick().desired == 0  # the grace, counted from the peer's demand, ran out
    await endpoint.close()


async def test_the_total_over_activators_sets_the_replica_count() -> None:
    backend, clock = PeeredBackend(), FakeClock()
    endpoint = _endpoint(backend, clock)
    backend.others = PeerLoad(mean=35.0, current=35)
    endpoint.poke()
    await turns()
    assert endpoint.ready_count == 1
    for _ in range(8):  # the stable window fills with the total
        clock.advance(1.0)
        decision = endpoint.tick()
        await turns()
    assert decision.desired == 4  # ceil(35 / 10): others' load alone, none here
    assert backend.reported[-1] == (0.0, 0)  # this activator reported its own (idle) load
    backend.others = PeerLoad()
    await endpoint.close()


async def test_a_withdrawn_start_fails_no_held_request_and_waiting_ones_start_again() -> None:
    # Issue 21, defect 2, the endpoint's side: a follower's start that its backend withdrew
    # (this activator just became the scaling leader) must not fail the request held here:
    # the endpoint decides again at once and, the request still waiting, starts anew.
    backend, clock = PeeredBackend(), FakeClock()
    endpoint = _endpoint(backend, clock)
    backend.withdraw_with = "this activator's scaling role changed"

    async def request() -> str:
        async with endpoint.acquire(0) as replica:
            return replica.id

    held = asyncio.ensure_future(request())
    await turns()
    assert await asyncio.wait_for(held, 5) == "m-2"  # the second start served it
    assert backend.starts == 2 and endpoint.last_error is None
    await endpoint.close()


async def test_a_withdrawn_start_with_nobody_waiting_is_not_started_again() -> None:
    backend, clock = PeeredBackend(), FakeClock()
    endpoint = _endpoint(backend, clock)
    backend.withdraw_with = "no request waits for the model any more"
    endpoint.expect_request()  # traffic announced: one start, then nobody waits
    await turns()
    assert backend.starts == 1 and endpoint.ready_count == 0
    for _ in range(5):  # within the idle grace the decision still says 1; nothing starts
        clock.advance(1.0)
        assert endpoint.tick().desired == 1
        await turns()
    assert backend.starts == 1
    backend.others = PeerLoad(mean=0.0, current=1)  # then a request waits elsewhere
    clock.advance(1.0)
    endpoint.tick()
    await turns()
    assert backend.starts == 2 and endpoint.ready_count == 1
    await endpoint.close()


async def test_an_unload_forgets_what_the_others_reported_of_the_model() -> None:
    """The leader learned an unload (another activator's, through the shared load state)
    before that activator's next report said its last request was served: the stale report's
    held request started a replica for the unloaded model, kept for its idle grace."""
    backend, clock = PeeredBackend(), FakeClock()
    endpoint = _endpoint(backend, clock)
    backend.others = PeerLoad(mean=0.0, current=1)  # held there, before its unload
    (wake,) = backend.wakers
    wake()
    await turns()
    assert endpoint.ready_count == 1
    await endpoint.unload(None)
    assert backend.forgotten == ["m"]
    assert endpoint.tick().desired == 0
    await turns()
    assert (endpoint.ready_count, backend.starts) == (0, 1)  # nothing started again
    await endpoint.close()


async def test_without_peers_nothing_changes() -> None:
    backend, clock = FakeScalerBackend(open_gate=True), FakeClock()
    endpoint = ModelEndpoint("m", SETTINGS, backend, Metrics(), clock=clock)
    assert not isinstance(backend, PeerConcurrency)
    assert endpoint.tick().desired == 0
    await endpoint.close()
