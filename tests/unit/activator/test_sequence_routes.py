"""Sequences under `thaw up`: read from the JSON header, bound to a replica, kept there, and
holding it against scale-down (a fake scaler backend, a stepped clock)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from activator.config import ScaleSettings
from activator.endpoint.autoscaler import Autoscaler
from activator.endpoint.model_endpoint import ModelEndpoint
from activator.endpoint.sequence_routes import SequenceKey, SequenceRoutes, sequence_key
from activator.observe.metrics import Metrics
from tests.fakes.clock import FakeClock
from tests.fakes.loop import settle
from tests.fakes.scaler_backend import FakeScalerBackend


def test_the_sequence_comes_from_the_json_or_the_binary_header_only() -> None:
    doc = {"inputs": [], "parameters": {"sequence_id": 7, "sequence_start": True}}
    body = json.dumps(doc).encode()
    assert sequence_key(body, None) == SequenceKey(7, True, False)
    assert sequence_key(body + b"\x00\x01tensor bytes", str(len(body))) == SequenceKey(
        7, True, False
    )
    assert sequence_key(b"raw bytes", "0") is None  # raw binary: no parameters
    for bad in (b"not json", b"[1]", b'{"parameters": {"sequence_id": 0}}',
                b'{"parameters": {"sequence_id": true}}', b'{"parameters": 3}'):  # fmt: skip
        assert sequence_key(bad, None) is None  # the replica answers those in Triton's words
    assert sequence_key(body, "abc") is None


def test_a_bound_sequence_keeps_its_replica_until_its_end_is_answered() -> None:
    routes = SequenceRoutes(idle_s=5)
    start, middle, end = (SequenceKey("s", True, False), SequenceKey("s", False, False),
                          SequenceKey("s", False, True))  # fmt: skip
    assert routes.replica_for(start) is None
    routes.begin(start, "r1", 0.0)
    routes.finish(start, 0.1)
    assert routes.replica_for(middle) == "r1" and routes.pinned(0.2) == {"r1"}
    routes.begin(end, "r1", 0.3)
    assert routes.pinned(0.4) == {"r1"}  # the END is in flight
    routes.finish(end, 0.5)
    assert routes.pinned(0.6) == set() and len(routes) == 0


def test_an_idle_sequence_is_forgotten_and_a_lost_replica_takes_its_sequences() -> None:
    routes = SequenceRoutes(idle_s=1.0)
    for seq, replica in (("a", "r1"), ("b", "r2")):
        key = SequenceKey(seq, True, False)
        routes.begin(key, replica, 0.0)
        routes.finish(key, 0.0)
    assert routes.pinned(0.9) == {"r1", "r2"}
    routes.forget_replica("r2")
    assert routes.pinned(0.95) == {"r1"}
    assert routes.pinned(1.0) == set()  # idle for 1 s: the replica released it too


SETTINGS = ScaleSettings(
    min_replicas=0, max_replicas=2, activation_timeout_s=5, scale_to_zero_grace_s=10
)


@pytest.fixture
def backend() -> FakeScalerBackend:
    fake = FakeScalerBackend()
    fake.gate.set()
    return fake


def _endpoint(backend: FakeScalerBackend, clock: FakeClock, **changes: int) -> ModelEndpoint:
    settings = dataclasses.replace(SETTINGS, **changes)  # type: ignore[arg-type]
    return ModelEndpoint(
        "m", settings, backend, Metrics(), clock=clock, autoscaler=Autoscaler(settings),
        sequence_idle_s=30.0,
    )  # fmt: skip


async def test_sequence_requests_follow_their_replica(backend: FakeScalerBackend) -> None:
    clock = FakeClock()
    endpoint = _endpoint(backend, clock, min_replicas=2)
    endpoint.tick()
    await settle(lambda: endpoint.ready_count == 2)
    assert endpoint.stateful and endpoint.direct_link() is None  # never handed off
    bound = {}
    for seq in ("a", "b", "c", "d"):  # one after another: nothing in flight to balance by
        async with endpoint.acquire(0, sequence=SequenceKey(seq, True, False)) as replica:
            bound[seq] = replica.id
    # Each new sequence went where the fewest live ones were: two and two.
    assert sorted(list(bound.values()).count(r) for r in set(bound.values())) == [2, 2]
    for _ in range(3):
        for seq, replica_id in bound.items():
            async with endpoint.acquire(0, sequence=SequenceKey(seq, False, False)) as replica:
                assert replica.id == replica_id
    await endpoint.close()


async def test_a_sequence_names_its_replica_only_while_that_is_in_rotation(
    backend: FakeScalerBackend,
) -> None:
    """What a gRPC stream opens a replica stream to (`sequence_replica`) is where `acquire`
    would send the request: a failed replica, not yet gone, is no longer named."""
    endpoint = _endpoint(backend, FakeClock(), min_replicas=2)
    endpoint.tick()
    await settle(lambda: endpoint.ready_count == 2)
    async with endpoint.acquire(0, sequence=SequenceKey(1, True, False)) as replica:
        pass
    assert endpoint.sequence_replica(SequenceKey(1, False, False)) == replica.id
    assert endpoint.sequence_replica(SequenceKey(1, True, False)) == replica.id  # START: there
    endpoint.replica_failed(replica, "connection reset")
    assert endpoint.sequence_replica(SequenceKey(1, False, False)) is None
    await endpoint.close()


async def test_a_model_with_a_live_sequence_is_not_scaled_to_zero_under_it(
    backend: FakeScalerBackend,
) -> None:
    clock = FakeClock()
    endpoint = _endpoint(backend, clock, max_replicas=1)
    async with endpoint.acquire(0, sequence=SequenceKey(1, True, False)):
        pass
    for _ in range(5):  # 25 s: past the 10 s idle grace, within the 30 s sequence idle time
        clock.now += 5
        endpoint.tick()
    assert endpoint.ready_count == 1  # the sequence still lives on it
    clock.now += 10  # 35 s: the sequence is idle too long and forgotten
    endpoint.tick()
    clock.now += 11  # then the ordinary idle grace
    endpoint.tick()
    await settle(lambda: backend.stopped != [])
    assert endpoint.ready_count == 0
    await endpoint.close()


def test_a_start_of_a_live_sequence_goes_where_it_lives() -> None:
    routes = SequenceRoutes(idle_s=5)
    first = SequenceKey("s", True, False)
    routes.begin(first, "r1", 0.0)
    routes.finish(first, 0.1)  # never ended: still live on r1
    assert routes.replica_for(SequenceKey("s", True, False)) == "r1"
    routes.begin(SequenceKey("s", True, True), "r1", 0.2)  # begun again there, and ended
    routes.finish(SequenceKey("s", True, True), 0.3)
    assert len(routes) == 0 and routes.replica_for(first) is None


async def test_a_sequence_started_again_on_its_id_stays_on_its_replica(
    backend: FakeScalerBackend,
) -> None:
    """L0_sequence_stress through `thaw up`: a client's sequence that never ended (its id's
    state on one replica), then a new sequence on the same id. Begun on the other replica (the
    one with fewer live sequences), the old one lived on where it was, and the next request
    without START, which Triton refuses, reached it and continued it."""
    clock = FakeClock()
    endpoint = _endpoint(backend, clock, min_replicas=2)
    endpoint.tick()
    await settle(lambda: endpoint.ready_count == 2)
    async with endpoint.acquire(0, sequence=SequenceKey("x", True, False)) as replica:
        holder = replica.id  # "x" never ends
    for other in ("y", "z"):  # the holder is the busier one: a new sequence goes elsewhere
        endpoint.sequence_sent(SequenceKey(other, True, False), holder)
    for key in (SequenceKey("x", True, False), SequenceKey("x", False, True)):
        async with endpoint.acquire(0, sequence=key) as replica:
            assert replica.id == holder
    assert endpoint.sequence_replica(SequenceKey("x", False, False)) is None  # ended
    async with endpoint.acquire(0, sequence=SequenceKey("n", True, False)) as replica:
        assert replica.id != holder  # a new sequence still goes where the fewest live ones are
    await endpoint.close()
