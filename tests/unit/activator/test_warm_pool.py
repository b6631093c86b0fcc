"""Stories of the warm pool with a fake process source and a stepped clock (no processes)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from activator.errors import ActivationFailed
from activator.scaler.local.pool_policy import PoolPolicy
from activator.scaler.local.warm_pool import WarmPool
from activator.scaler.local_config import PoolSettings
from tests.fakes.clock import FakeClock


class FakeProc:
    """What the pool uses of a ReplicaProcess."""

    def __init__(self, name: str, pid: int) -> None:
        self.name, self.url, self.alive = name, f"http://fake/{name}", True
        self.proc = type("P", (), {"pid": pid})()
        self.stopped = False

    async def wait_ready(self, session: Any, deadline: float) -> None:
        return None

    async def stop(self, timeout_s: float) -> int:
        self.stopped, self.alive = True, False
        return 0


class FakeSource:
    """A ProcessSource whose starts succeed at once (or fail, while `fail` is set)."""

    kind = "fake"

    def __init__(self) -> None:
        self.started: list[FakeProc] = []
        self.fail = False

    def available(self) -> bool:
        return True

    async def start_process(self, args: Sequence[str], name: str) -> FakeProc:
        if self.fail:
            raise ActivationFailed("no")
        proc = FakeProc(name, 1000 + len(self.started))
        self.started.append(proc)
        return proc

    def server_pid(self) -> int | None:
        return None

    async def close(self) -> None:
        return None


def _pool(clock: FakeClock, **settings: Any) -> tuple[WarmPool, FakeSource]:
    source = FakeSource()
    policy = PoolPolicy(PoolSettings(window_s=60, **settings))
    pool = WarmPool(
        policy, [source], lambda: ["repo"], session=None,  # type: ignore[arg-type]
        start_timeout_s=5, refill_delay_s=1.0, clock=clock,
    )  # fmt: skip
    return pool, source


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_pool_fills_to_its_minimum_and_a_claim_takes_an_idle_process() -> None:
    clock = FakeClock()
    pool, source = _pool(clock, min_idle=1)
    pool.resize()
    await _settle()
    assert pool.ready_count == 1 and len(source.started) == 1
    proc = await pool.claim("a", deadline=clock.now + 10)
    assert proc is source.started[0] and pool.ready_count == 0
    await pool.close()


async def test_an_empty_pool_starts_a_process_for_the_claim_at_once() -> None:
    clock = FakeClock()
    pool, source = _pool(clock, min_idle=0)
    proc = await pool.claim("a", deadline=clock.now + 10)  # nothing idle: started for it
    assert proc is source.started[0] and proc.name.startswith("a-claim")
    await pool.close()


async def test_refills_wait_for_the_claimed_replica_then_cover_every_recent_model() -> None:
    clock = FakeClock()
    pool, source = _pool(clock, min_idle=1)
    pool.resize()
    await _settle()
    for model in ("a", "b", "c"):  # three models wake together
        await pool.claim(model, deadline=clock.now + 10)
    assert pool.resize().target == 3
    await _settle()
    assert pool.ready_count == 0  # within the refill delay: nothing starts next to the loads
    clock.advance(1.5)
    pool.resize()
    await _settle()
    assert pool.ready_count == 3  # one idle process per model that woke within the window
    status = pool.status()
    assert (status.size, status.ready, status.demand, status.limit) == (3, 3, 3, "demand")
    clock.advance(61)  # the window passes without a wake: back to the minimum
    decision = pool.resize()
    await _settle()
    assert (decision.target, pool.ready_count) == (1, 1)
    assert sum(p.stopped for p in source.started) == 2
    await pool.close()
    assert all(p.stopped for p in source.started if p.alive is False)


async def test_a_dead_idle_process_is_never_handed_out() -> None:
    clock = FakeClock()
    pool, source = _pool(clock, min_idle=1)
    pool.resize()
    await _settle()
    source.started[0].alive = False  # it died while idle
    proc = await pool.claim("a", deadline=clock.now + 10)
    assert proc is source.started[1]
    await pool.close()


async def test_failing_starts_are_counted_and_the_claim_fails_clearly() -> None:
    clock = FakeClock()
    pool, source = _pool(clock, min_idle=1)
    source.fail = True
    pool.resize()
    await _settle()
    assert pool.status().failures == 1 and pool.ready_count == 0
    try:
        await pool.claim("a", deadline=clock.now + 10)
    except ActivationFailed as exc:
        assert "no" in str(exc)
    else:
        raise AssertionError("the claim should fail")
    source.fail = False
    clock.advance(2)
    pool.resize()
    await _settle()
    assert pool.ready_count == 1 and pool.status().failures == 0
    await pool.close()
