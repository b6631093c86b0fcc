"""Direct connections in the endpoint and settings: which replica gets a connection, and the
autoscaler seeing load that never passes through the activator."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from pathlib import Path

import pytest

from activator.config import ActivatorConfig, BoundAddresses, ScaleSettings, validated
from activator.endpoint.model_endpoint import ModelEndpoint
from activator.errors import ConfigError
from activator.observe.metrics import Metrics
from activator.scaler.local.backend import replica_argv, serve_args
from activator.scaler.local_config import LocalConfig
from tests.fakes.clock import FakeClock
from tests.fakes.loop import settle
from tests.fakes.scaler_backend import FakeScalerBackend


class FakeLink:
    """A replica's handoff socket as the endpoint sees it: reported load, a sampled mean."""

    def __init__(self, replica_id: str) -> None:
        self.replica_id = replica_id
        self.connected = True
        self.connections = 0
        self.in_flight = 0
        self.mean = 0.0  # what the next sample() returns
        self.quiet = asyncio.Event()  # `quiesce` returns once set (its clients are gone)
        self.quiesced: list[float] = []  # the limits `quiesce` was called with

    def sample(self, now: float) -> float:
        return self.mean

    async def quiesce(self, timeout_s: float) -> None:
        self.quiesced.append(timeout_s)
        await self.quiet.wait()


class LinkedBackend(FakeScalerBackend):
    """A fake backend whose replicas take handed-off connections."""

    def __init__(self) -> None:
        super().__init__()
        self.links: dict[str, FakeLink] = {}

    def handoff_link(self, replica_id: str) -> FakeLink:
        return self.links.setdefault(replica_id, FakeLink(replica_id))


def _endpoint(backend: FakeScalerBackend, clock: FakeClock, **changes: object) -> ModelEndpoint:
    settings = ScaleSettings(
        max_replicas=3,
        target_concurrency=1,
        container_concurrency=0,
        activation_timeout_s=5,
        scale_to_zero_grace_s=10,
    )
    settings = dataclasses.replace(settings, **changes)  # type: ignore[arg-type]
    return ModelEndpoint("m", settings, backend, Metrics(), drain_timeout_s=2.0, clock=clock)


async def _two_replicas(
    backend: LinkedBackend, clock: FakeClock, **changes: object
) -> ModelEndpoint:
    endpoint = _endpoint(backend, clock, min_replicas=2, **changes)
    backend.gate.set()
    endpoint.tick()
    await settle(lambda: endpoint.ready_count == 2)
    assert endpoint.ready_count == 2
    return endpoint


async def test_a_new_connection_goes_to_the_least_loaded_connected_replica() -> None:
    backend, clock = LinkedBackend(), FakeClock()
    endpoint = await _two_replicas(backend, clock)
    first, second = (backend.handoff_link(r.id) for r in endpoint.replicas)
    first.connections, second.connections, second.in_flight = 3, 1, 1
    assert endpoint.direct_link() is second
    second.in_flight = 5
    assert endpoint.direct_link() is first
    first.connected = False  # its socket went away: never chosen
    assert endpoint.direct_link() is second
    endpoint.replicas[1].draining = True
    assert endpoint.direct_link() is None
    await endpoint.close()


async def test_no_direct_link_when_disabled_held_or_cold() -> None:
    backend, clock = LinkedBackend(), FakeClock()
    cold = _endpoint(backend, clock)
    assert cold.direct_link() is None  # no replica at all
    endpoint = await _two_replicas(backend, clock)
    assert endpoint.direct_link() is not None
    await endpoint.close()
    limited = await _two_replicas(LinkedBackend(), clock, container_concurrency=4)
    assert limited.direct_link() is None  # a per-replica limit needs every request in-path
    await limited.close()
    disabled = await _two_replicas(LinkedBackend(), clock, direct_connections=False)
    assert disabled.direct_link() is None
    await disabled.close()
    assert _endpoint(FakeScalerBackend(), clock).direct_link() is None  # backend without handoff


async def test_a_model_not_loaded_is_handed_no_connection() -> None:
    """Explicit model control: an unloaded model's replicas drain, and none of them may take
    a new connection meanwhile (the activator refuses its requests, docs/decisions/0024)."""
    backend, clock, loaded = LinkedBackend(), FakeClock(), [True]
    settings = ScaleSettings(max_replicas=2, container_concurrency=0, activation_timeout_s=5)
    endpoint = ModelEndpoint(
        "m", settings, backend, Metrics(), drain_timeout_s=2.0, clock=clock,
        loaded=lambda: loaded[0],
    )  # fmt: skip
    backend.gate.set()
    await endpoint.warm()
    assert endpoint.direct_link() is not None
    assert endpoint.directly_connected() == ()  # handed nothing yet
    backend.handoff_link(endpoint.replicas[0].id).connections = 1
    assert endpoint.directly_connected() == endpoint.replicas
    loaded[0] = False
    assert endpoint.direct_link() is None
    await endpoint.close()


async def test_the_autoscaler_sees_direct_load_and_scales_up() -> None:
    backend, clock = LinkedBackend(), FakeClock()
    endpoint = await _two_replicas(backend, clock)
    for replica in endpoint.replicas:
        link = backend.handoff_link(replica.id)
        link.mean, link.in_flight, link.connections = 2.5, 3, 4
    clock.now += 0.5
    decision = endpoint.tick()  # 5 in flight on direct connections, target 1: three replicas
    assert decision.desired == 3
    assert endpoint.status().direct_connections == 8
    assert {r.direct_in_flight for r in endpoint.status().replicas} == {3}
    await endpoint.close()


async def test_idle_direct_connections_do_not_keep_a_replica() -> None:
    backend, clock = LinkedBackend(), FakeClock()
    endpoint = _endpoint(backend, clock, scale_to_zero_grace_s=1)
    backend.gate.set()
    await endpoint.warm()
    link = backend.handoff_link(endpoint.replicas[0].id)
    link.connections = 2  # open but idle: no requests in flight, no busy time
    for _ in range(4):
        clock.now += 0.5
        decision = endpoint.tick()
    assert decision.desired == 0
    await endpoint.close()


async def test_a_scaled_down_replica_is_stopped_once_its_direct_clients_are_gone() -> None:
    """Keep-alive clients busy on a draining replica's direct connections got a 502 or a reset
    when it was stopped under them: the scale-down waits for its link to be quiet first (they
    leave at max age), counting its direct load meanwhile; a shutdown does not wait."""
    backend, clock = LinkedBackend(), FakeClock()
    endpoint = _endpoint(backend, clock, stable_window_s=6, panic_window_s=1)
    backend.gate.set()
    await endpoint.warm()
    first = endpoint.replicas[0]
    backend.handoff_link(first.id).mean = 2.0  # two requests in flight on direct connections
    for _ in range(4):
        clock.now += 0.5
        endpoint.tick()
    await settle(lambda: endpoint.ready_count == 2)
    second = next(r for r in endpoint.replicas if r is not first)
    backend.handoff_link(first.id).mean = 0.5
    backend.handoff_link(second.id).mean = 0.25  # the load falls to one replica's worth
    for _ in range(40):
        clock.now += 0.5
        if endpoint.tick().desired == 1:
            break
    await settle(lambda: any(r.draining for r in endpoint.replicas))
    (draining,) = (r for r in endpoint.replicas if r.draining)
    link = backend.handoff_link(draining.id)
    await settle(lambda: link.quiesced == [2.0])  # the drain timeout: in-path requests took 0
    # Not stopped yet, and still one of the replicas whose direct load is sampled.
    assert draining.id not in backend.stopped and draining in endpoint.replicas
    link.quiet.set()
    await settle(lambda: draining.id in backend.stopped)
    assert draining not in endpoint.replicas
    kept = endpoint.replicas[0]
    await endpoint.close()  # its link is never quiet: a shutdown does not wait for it
    assert kept.id in backend.stopped and backend.handoff_link(kept.id).quiesced == []


async def test_a_scale_down_drains_the_replica_with_the_least_direct_work() -> None:
    """In-path in-flight counts are 0 on both replicas; one is busy on direct connections. The
    scale-down drains the other (the newest-first rule alone picked the busy one when it was
    the newer, and its drain then waited for its clients)."""
    backend, clock = LinkedBackend(), FakeClock()
    endpoint = _endpoint(backend, clock, stable_window_s=6, panic_window_s=1)
    backend.gate.set()
    await endpoint.warm()
    backend.handoff_link(endpoint.replicas[0].id).mean = 2.0  # two replicas' worth
    for _ in range(4):
        clock.now += 0.5
        endpoint.tick()
    await settle(lambda: endpoint.ready_count == 2)
    backend.handoff_link(endpoint.replicas[0].id).mean = 0.0
    older, newer = sorted(endpoint.replicas, key=lambda r: r.ready_at)
    busy = backend.handoff_link(newer.id)
    busy.in_flight, busy.connections = 1, 3  # the newer one is busy on direct connections
    backend.handoff_link(older.id).connections = 1  # the older one: an idle client
    for _ in range(40):
        busy.mean = 0.5  # half a request's worth: one replica is enough
        clock.now += 0.5
        if endpoint.tick().desired == 1:
            break
    await settle(lambda: any(r.draining for r in endpoint.replicas))
    (draining,) = (r for r in endpoint.replicas if r.draining)
    assert draining is older
    backend.handoff_link(older.id).quiet.set()
    await settle(lambda: older.id in backend.stopped)
    await endpoint.close()


async def test_a_replacement_not_waited_for_is_out_of_rotation_at_once() -> None:
    """A load (or scale-to-zero) a replica carried to the activator cannot wait for that
    replica's stop, which waits for its connections to be quiet, the one carrying the call
    too. Not waited for, the replicas are out of rotation at the return (a request meanwhile
    wakes a new one) and stop once quiet; waited for, the call returns only then."""
    backend, clock = LinkedBackend(), FakeClock()
    endpoint = _endpoint(backend, clock)
    backend.gate.set()
    await endpoint.warm()
    (old,) = endpoint.replicas
    async with asyncio.timeout(5):
        await endpoint.replace_replicas(wait=False)  # its link is not quiet: returns all the same
    assert (old.draining, endpoint.ready_count, old.id in backend.stopped) == (True, 0, False)
    await endpoint.warm()  # a replica of the new files, beside the one draining
    (new,) = (r for r in endpoint.replicas if r is not old)
    backend.handoff_link(old.id).quiet.set()
    await settle(lambda: old.id in backend.stopped)
    waited = asyncio.create_task(endpoint.scale_to_zero())
    await settle(lambda: backend.handoff_link(new.id).quiesced != [])
    assert not waited.done() and new.id not in backend.stopped  # waits for the quiet link
    backend.handoff_link(new.id).quiet.set()
    await asyncio.wait_for(waited, 5)
    assert new.id in backend.stopped
    await endpoint.close()


def test_direct_connections_is_a_true_false_setting() -> None:
    base = ScaleSettings()
    assert base.direct_connections is True
    off = validated(base, {"thaw.direct_connections": "false"}, model="m")
    assert off.direct_connections is False
    assert validated(off, {"thaw.direct_connections": " TRUE "}, model="m").direct_connections
    assert validated(base, {"direct_connections": "off"}).direct_connections is False
    with pytest.raises(ConfigError) as err:
        validated(base, {"thaw.direct_connections": "yes"}, model="m")
    assert err.value.message == "`thaw.direct_connections` = 'yes' (model m), must be true or false"


def test_replicas_take_connections_only_when_there_is_a_front_door(tmp_path: Path) -> None:
    config = ActivatorConfig(repository=tmp_path, max_body_bytes=10)
    local = LocalConfig()
    bound = BoundAddresses(8000, None, front_door_url="http://127.0.0.1:8000")
    argv = replica_argv(
        config,
        local,
        bound,
        handoff_socket=tmp_path / "r.sock",
        handoff_state=tmp_path / "r.state",
    )
    flags = dict(itertools.pairwise(argv))
    assert flags["--handoff-socket"] == str(tmp_path / "r.sock")
    assert flags["--handoff-state"] == str(tmp_path / "r.state")
    assert flags["--front-door"] == "http://127.0.0.1:8000"
    assert flags["--handoff-max-age-s"] == "10"
    assert flags["--max-body-bytes"] == "1024"  # the activator's cap, within the runtime's range
    assert "--handoff-socket" not in replica_argv(config, local, handoff_socket=tmp_path / "r.sock")


def test_spawned_and_forked_replicas_get_the_same_serve_flags(tmp_path: Path) -> None:
    # A spawned pool process runs `serve_command + serve_args`; a forked one is sent
    # `serve_args` in its fork request (process_source.ForkSource): one set of flags for both.
    config = ActivatorConfig(repository=tmp_path, cache_dir=tmp_path / "cache", store="s3://b/p",
                             cache_max_bytes=1 << 30, host_cache_bytes=1 << 20,
                             host_cache_dir=tmp_path / "tier")  # fmt: skip
    local = LocalConfig(preload_frameworks=("torch",))
    bound = BoundAddresses(8000, None, front_door_url="http://127.0.0.1:8000")
    kwargs = {"handoff_socket": tmp_path / "r.sock", "handoff_state": tmp_path / "r.state"}
    forked = serve_args(config, local, bound, **kwargs)
    assert replica_argv(config, local, bound, **kwargs) == [*local.serve_command, *forked]
    flags = dict(itertools.pairwise(forked))
    assert flags["--port"] == "0" and flags["--grpc-port"] == "0"  # announced on stdout
    assert flags["--ensemble-steps-url"] == "http://127.0.0.1:8000"
    assert flags["--cache"] == str(tmp_path / "cache") and flags["--store"] == "s3://b/p"
    assert flags["--host-cache"] == str(tmp_path / "tier")
    assert flags["--preload-frameworks"] == "torch"


def test_replicas_get_the_gRPC_front_door_for_BLS_streams_when_known(tmp_path: Path) -> None:
    config = ActivatorConfig(repository=tmp_path, cache_dir=tmp_path / "cache")
    kwargs = {"handoff_socket": tmp_path / "r.sock", "handoff_state": tmp_path / "r.state"}
    url = "http://127.0.0.1:8000"
    bound = BoundAddresses(8000, 8001, front_door_url=url, front_door_grpc="127.0.0.1:8001")
    flags = dict(itertools.pairwise(serve_args(config, LocalConfig(), bound, **kwargs)))
    assert flags["--front-door"] == "http://127.0.0.1:8000"
    assert flags["--front-door-grpc"] == "127.0.0.1:8001"
    no_grpc = BoundAddresses(8000, None, front_door_url=url)
    without = serve_args(config, LocalConfig(), no_grpc, **kwargs)
    assert "--front-door-grpc" not in without
