"""Held queue, breaker and balancer: the admission primitives."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import pytest

from activator.endpoint.balancer import pick
from activator.endpoint.breaker import Breaker
from activator.endpoint.held_queue import HeldQueue, HeldRequest
from activator.errors import ActivatorError, Overloaded


def _item(size: int = 0, deadline: float = 10.0) -> HeldRequest[int]:
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    return HeldRequest(size, deadline, 0.0, future)


async def test_held_queue_is_fifo() -> None:
    queue: HeldQueue[int] = HeldQueue(max_count=10, max_bytes=100)
    items = [_item() for _ in range(3)]
    for item in items:
        queue.push(item)
    assert [queue.pop(), queue.pop(), queue.pop(), queue.pop()] == [*items, None]


async def test_held_queue_refuses_past_count_with_503() -> None:
    queue: HeldQueue[int] = HeldQueue(max_count=2, max_bytes=100, model="bert")
    queue.push(_item())
    queue.push(_item())
    with pytest.raises(Overloaded) as info:
        queue.push(_item())
    assert info.value.status == 503
    assert info.value.headers()["Retry-After"] == "1"
    assert "max_held_requests = 2" in info.value.message


async def test_held_queue_refuses_past_bytes() -> None:
    queue: HeldQueue[int] = HeldQueue(max_count=10, max_bytes=100)
    queue.push(_item(60))
    with pytest.raises(Overloaded, match="max_held_bytes = 100"):
        queue.push(_item(50))
    queue.push(_item(40))
    assert queue.bytes == 100


async def test_the_first_held_request_is_held_whatever_its_size() -> None:
    # The body cap bounds one request; the byte bound is of requests held together.
    queue: HeldQueue[int] = HeldQueue(max_count=10, max_bytes=100)
    queue.push(_item(500))
    with pytest.raises(Overloaded, match="held bodies would total 501 bytes"):
        queue.push(_item(1))
    assert queue.pop() is not None and queue.bytes == 0
    queue.push(_item(500))  # empty again: held


async def test_removed_and_cancelled_requests_are_never_released() -> None:
    queue: HeldQueue[int] = HeldQueue(max_count=10, max_bytes=100)
    gone, cancelled, waiting = _item(10), _item(10), _item(10)
    for item in (gone, cancelled, waiting):
        queue.push(item)
    assert queue.remove(gone)
    assert not queue.remove(gone)
    cancelled.future.cancel()
    assert queue.pop() is waiting
    assert queue.bytes == 0 and len(queue) == 0


async def test_expired_takes_only_late_requests() -> None:
    queue: HeldQueue[int] = HeldQueue(max_count=10, max_bytes=100)
    early, late = _item(deadline=1.0), _item(deadline=5.0)
    queue.push(early)
    queue.push(late)
    assert queue.expired(2.0) == [early]
    assert len(queue) == 1


def test_breaker_limits_and_scopes_slots() -> None:
    breaker = Breaker(2)
    with breaker.slot(), breaker.slot():
        assert not breaker.has_capacity()
        with pytest.raises(ActivatorError), breaker.slot():
            pass
    assert breaker.in_flight == 0


def test_breaker_slot_released_on_error() -> None:
    breaker = Breaker(1)
    with pytest.raises(RuntimeError), breaker.slot():
        raise RuntimeError("boom")
    assert breaker.try_take()


def test_unlimited_breaker() -> None:
    breaker = Breaker(0)
    for _ in range(1000):
        assert breaker.try_take()
    with pytest.raises(ValueError):
        Breaker(-1)


@dataclass
class _R:
    in_flight: int
    full: bool = False

    def can_take(self) -> bool:
        return not self.full


def test_balancer_prefers_fewer_in_flight() -> None:
    rng = random.Random(1)
    a, b = _R(5), _R(1)
    assert pick([a, b], rng) is b
    assert pick([a, _R(0, full=True)], rng) is a
    assert pick([_R(0, full=True)], rng) is None
    assert pick([], rng) is None


def test_power_of_two_spreads_and_never_picks_the_busiest() -> None:
    rng = random.Random(7)
    replicas = [_R(i) for i in range(5)]
    picks = [pick(replicas, rng) for _ in range(500)]
    assert replicas[4] not in picks  # the most loaded never wins a pair
    assert len({id(p) for p in picks}) >= 3
