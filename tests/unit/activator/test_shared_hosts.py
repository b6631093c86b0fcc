"""The local backend's shared runtimes over fake processes: placing, evicting through the
model's endpoint, waiting for a victim that was already draining, an unload refused, models
naming one rate-limiter resource placed together."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import aiohttp
import pytest

from activator.errors import ActivationFailed
from activator.scaler.backend import ModelActivity
from activator.scaler.local.shared_hosts import SharedHosts
from activator.scaler.local.warm_pool import WarmPool
from activator.scaler.local_config import SharedSettings
from tests.fakes.clock import FakeClock
from tests.fakes.loop import eventually, turns

MiB = 1 << 20
SETTINGS = SharedSettings(
    budget_bytes=10 * MiB, model_overhead_bytes=0, evict_grace_s=2, release_grace_s=5
)


class _Exit:
    """The `proc.proc` part of a fake runtime: a pid and an exit to wait for."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.exited = asyncio.Event()

    async def wait(self) -> int:
        await self.exited.wait()
        return self.returncode or 0


class _Control:
    def __init__(self, proc: _Runtime) -> None:
        self._proc = proc

    async def unload(self, model: str, *, timeout_s: float) -> None:
        if self._proc.refuse_unload:
            raise ActivationFailed(f"model '{model}' failed to unload: busy")
        self._proc.loaded.remove(model)


class _Runtime:
    """A fake `thaw serve` in explicit mode: what is loaded, and whether it runs."""

    def __init__(self, pid: int) -> None:
        self.proc = _Exit(pid)
        self.name = f"pool-{pid}"
        self.url = "http://127.0.0.1:1"  # nothing listens: load counters are not read
        self.grpc_address = None
        self.loaded: list[str] = []
        self.control = _Control(self)
        self.refuse_unload = False
        self.gate: asyncio.Event | None = None  # a load waits for it when set

    @property
    def alive(self) -> bool:
        return not self.proc.exited.is_set()

    async def load(
        self, model: str, timeout_s: float, parameters: Mapping[str, str] | None = None
    ) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.loaded.append(model)

    async def stop(self, timeout_s: float) -> int:
        self.proc.exited.set()
        return 0

    def stderr_tail(self, lines: int = 8) -> str:
        return ""


class _Pool:
    def __init__(self) -> None:
        self.claimed: list[_Runtime] = []

    async def claim(self, model: str, deadline: float) -> _Runtime:
        runtime = _Runtime(100 + len(self.claimed))
        self.claimed.append(runtime)
        return runtime

    def refill_later(self) -> None:
        pass


class _Models:
    """Each model's activity and its endpoint's scale to zero (which stops its replica)."""

    def __init__(self, hosts: SharedHosts) -> None:
        self.hosts = hosts
        self.activity: dict[str, ModelActivity] = {}
        self.replica: dict[str, str] = {}
        self.evicted: list[str] = []
        self.draining: set[str] = set()  # models whose own scale to zero is in progress

    def share(self, model: str, nbytes: int, resources: frozenset[str] = frozenset()) -> None:
        self.activity[model] = ModelActivity()
        self.hosts.share(model, image_bytes=nbytes, activity=lambda: self.activity[model],
                         evict=self._evict(model), resources=resources)  # fmt: skip

    def _evict(self, model: str) -> Callable[[], Awaitable[None]]:
        async def evict() -> None:
            self.evicted.append(model)
            if model in self.draining:
                return  # its drain (elsewhere) stops the replica later
            await self.hosts.stop(self.replica[model])

        return evict

    async def start(self, model: str, at: float) -> _Runtime:
        replica_id = f"{model}-r"
        self.replica[model] = replica_id
        self.activity[model] = ModelActivity(last_request_at=at)
        return cast(_Runtime, await self.hosts.start(model, replica_id, deadline=1e9))


@pytest.fixture
async def setup() -> Any:
    clock = FakeClock()
    pool = _Pool()
    async with aiohttp.ClientSession() as session:
        hosts = SharedHosts(cast(WarmPool, pool), SETTINGS, session, drain_timeout_s=5,
                            clock=clock)  # fmt: skip
        yield hosts, _Models(hosts), pool, clock
        await hosts.close()


async def test_models_pack_into_one_runtime_and_the_lru_idle_one_makes_room(setup: Any) -> None:
    hosts, models, pool, clock = setup
    for name in ("a", "b", "c"):
        models.share(name, 4 * MiB)
    first = await models.start("a", clock())
    clock.advance(1)
    assert await models.start("b", clock()) is first  # the same process
    assert first.loaded == ["a", "b"] and len(pool.claimed) == 1
    clock.advance(5)  # both idle past the 2 s grace; "a" is the older
    assert await models.start("c", clock()) is first
    assert models.evicted == ["a"] and first.loaded == ["b", "c"]
    assert hosts.counts()["a"].evictions == 1
    assert [r.models for r in hosts.status()] == [("b", "c")]


async def test_a_busy_model_keeps_its_room_and_the_wake_gets_a_new_runtime(setup: Any) -> None:
    hosts, models, _pool, clock = setup
    for name in ("a", "b"):
        models.share(name, 8 * MiB)
    first = await models.start("a", clock())
    clock.advance(100)
    models.activity["a"] = ModelActivity(in_flight=1, last_request_at=0.0)
    second = await models.start("b", clock())
    assert second is not first and models.evicted == []
    assert sorted(r.models for r in hosts.status()) == [("a",), ("b",)]


async def test_a_victim_already_draining_is_waited_for_before_its_room_is_reused(
    setup: Any,
) -> None:
    hosts, models, _pool, clock = setup
    for name in ("a", "b"):
        models.share(name, 8 * MiB)
    first = await models.start("a", clock())
    clock.advance(10)
    models.draining.add("a")  # its own scale to zero has begun: `evict` returns at once
    waking = asyncio.create_task(models.start("b", clock()))
    await turns()
    assert not waking.done()  # its room is not free yet
    await hosts.stop("a-r")  # the drain ends: the replica is unloaded
    assert await asyncio.wait_for(waking, 5) is first
    assert first.loaded == ["b"]


async def test_an_unload_refused_stops_the_runtime_and_the_wake_fails_cleanly(
    setup: Any,
) -> None:
    hosts, models, pool, clock = setup
    for name in ("a", "b"):
        models.share(name, 8 * MiB)
    first = await models.start("a", clock())
    first.refuse_unload = True
    clock.advance(10)
    lost = asyncio.create_task(hosts.wait_lost("a-r"))
    await turns()  # its replica's watch has begun
    with pytest.raises(ActivationFailed, match="no room for model 'b'"):
        await models.start("b", clock())
    assert not first.alive
    assert await asyncio.wait_for(lost, 5) == "unloaded"  # stopped as asked, then the runtime
    # The next wake places again, on a new runtime.
    assert await models.start("b", clock()) is pool.claimed[1]


async def test_two_replicas_of_one_model_starting_at_once_go_to_two_runtimes(
    setup: Any,
) -> None:
    hosts, models, pool, clock = setup
    models.share("a", MiB)
    models.share("b", MiB)
    first = await models.start("b", clock())
    first.gate = asyncio.Event()  # "a"'s loads wait
    starts = [asyncio.create_task(hosts.start("a", f"a-{i}", deadline=1e9)) for i in range(2)]
    await turns()
    assert len(pool.claimed) == 2  # the second could not go where the first is loading
    first.gate.set()
    runtimes = await asyncio.wait_for(asyncio.gather(*starts), 5)
    assert runtimes[0] is not runtimes[1]
    assert sorted(r.models for r in hosts.status()) == [("a",), ("a", "b")]


async def test_an_empty_runtime_is_released_after_its_grace(setup: Any) -> None:
    hosts, models, _pool, clock = setup
    models.share("a", MiB)
    first = await models.start("a", clock())
    await hosts.stop("a-r")
    clock.advance(4.9)
    await asyncio.sleep(1.2)  # release polls (every 0.5 s, real time) at 4.9 s: kept
    assert first.alive and len(hosts.status()) == 1
    clock.advance(0.2)
    await eventually(lambda: not first.alive, timeout_s=10)
    assert hosts.status() == ()


async def test_models_naming_one_rate_limiter_resource_start_in_one_runtime(setup: Any) -> None:
    hosts, models, pool, clock = setup
    models.share("a", 6 * MiB, frozenset({"R"}))
    models.share("b", 6 * MiB, frozenset({"R", "S"}))
    models.share("c", 6 * MiB)
    first = await models.start("a", clock())
    second = await models.start("c", clock())  # no room beside "a" (10 MiB budget)
    assert second is not first
    models.activity["a"] = ModelActivity(in_flight=1, last_request_at=clock())
    # "b" goes where "a" is, over the budget (nobody is idle), not to a runtime of its own
    # where its rate limiter would count it alone.
    assert await models.start("b", clock()) is first
    assert first.loaded == ["a", "b"] and models.evicted == []
    assert sorted(r.models for r in hosts.status()) == [("a", "b"), ("c",)]
    assert len(pool.claimed) == 2
