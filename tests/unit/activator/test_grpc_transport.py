"""activator.surfaces.grpc_transport: a replica leaves rotation when a call's UNAVAILABLE came
with its connection ending — when the channel has already left READY, or leaves it within the
settle time (grpc updates the state on its own thread, after the call's error may have reached
the loop); a replica whose channel stays READY answered UNAVAILABLE itself and stays.

The channel is a fake whose state the test moves, as grpc's thread would."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from activator.surfaces.grpc_transport import TransportWatch
from tests.fakes.loop import HUNG_AFTER_S, turns

READY = grpc.ChannelConnectivity.READY
IDLE = grpc.ChannelConnectivity.IDLE
SHUTDOWN = grpc.ChannelConnectivity.SHUTDOWN


class _Channel:
    """A channel whose connectivity the test sets; `watches`: state-change waits begun."""

    def __init__(self, state: grpc.ChannelConnectivity) -> None:
        self.state = state
        self.watches = 0
        self._changed = asyncio.Event()

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self.state

    def move(self, state: grpc.ChannelConnectivity) -> None:
        self.state = state
        self._changed.set()

    async def wait_for_state_change(self, last: grpc.ChannelConnectivity) -> None:
        self.watches += 1
        if self.state == SHUTDOWN:
            raise grpc.aio.UsageError("Channel is closed.")
        while self.state == last:
            self._changed.clear()
            await self._changed.wait()


class _Error(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "Socket closed") -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class _Endpoint:
    def __init__(self) -> None:
        self.failed: list[tuple[str, str]] = []

    def replica_failed(self, replica: Any, reason: str) -> None:
        self.failed.append((replica.id, reason))


def _replica(name: str = "r1") -> Any:
    return SimpleNamespace(id=name)


UNAVAILABLE = _Error(grpc.StatusCode.UNAVAILABLE)


async def _settled(watch: TransportWatch) -> None:
    await asyncio.wait_for(watch.settled(), HUNG_AFTER_S)


async def test_a_channel_already_gone_takes_the_replica_out_at_once() -> None:
    endpoint, watch = _Endpoint(), TransportWatch()
    watch.call_failed(endpoint, _replica(), UNAVAILABLE, _Channel(IDLE))  # type: ignore[arg-type]
    assert endpoint.failed == [("r1", "gRPC transport: Socket closed")]


async def test_a_channel_that_leaves_ready_after_the_error_takes_the_replica_out() -> None:
    """The race a GOAWAY loses: the call's error first, the channel's IDLE a moment later."""
    endpoint, watch, channel = _Endpoint(), TransportWatch(settle_s=HUNG_AFTER_S), _Channel(READY)
    watch.call_failed(endpoint, _replica(), UNAVAILABLE, channel)  # type: ignore[arg-type]
    assert endpoint.failed == []
    await turns()
    channel.move(IDLE)
    await _settled(watch)
    assert endpoint.failed == [("r1", "gRPC transport: Socket closed")]


async def test_a_channel_that_stays_ready_leaves_the_replica_in_rotation() -> None:
    endpoint, watch = _Endpoint(), TransportWatch(settle_s=0.05)
    channel = _Channel(READY)
    error = _Error(grpc.StatusCode.UNAVAILABLE, "Exceeds maximum queue size")
    watch.call_failed(endpoint, _replica(), error, channel)  # type: ignore[arg-type]
    await _settled(watch)
    assert channel.watches == 1
    assert endpoint.failed == []


@pytest.mark.parametrize(
    "code", [grpc.StatusCode.INTERNAL, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED]
)
async def test_an_error_other_than_unavailable_is_the_replicas_answer(
    code: grpc.StatusCode,
) -> None:
    endpoint, watch, channel = _Endpoint(), TransportWatch(), _Channel(IDLE)
    watch.call_failed(endpoint, _replica(), _Error(code), channel)  # type: ignore[arg-type]
    await _settled(watch)
    assert endpoint.failed == []
    assert channel.watches == 0


async def test_a_burst_of_refusals_watches_a_replica_once() -> None:
    endpoint, watch, channel = _Endpoint(), TransportWatch(settle_s=HUNG_AFTER_S), _Channel(READY)
    for _ in range(1000):
        watch.call_failed(endpoint, _replica(), UNAVAILABLE, channel)  # type: ignore[arg-type]
    other = _Channel(READY)
    watch.call_failed(endpoint, _replica("r2"), UNAVAILABLE, other)  # type: ignore[arg-type]
    # A runtime shared by two models is a replica of each: the other model's is watched too.
    sharing = _Endpoint()
    watch.call_failed(sharing, _replica(), UNAVAILABLE, channel)  # type: ignore[arg-type]
    await turns()
    assert (channel.watches, other.watches) == (2, 1)
    channel.move(IDLE)
    other.move(IDLE)
    await _settled(watch)
    assert sorted(name for name, _ in endpoint.failed) == ["r1", "r2"]
    assert [name for name, _ in sharing.failed] == ["r1"]


async def test_a_channel_closed_by_the_forwarder_is_not_a_failure() -> None:
    """Closed under the watch (its replica pruned, the activator stopping): SHUTDOWN is the
    forwarder's doing, not the replica's connection."""
    endpoint, watch, channel = _Endpoint(), TransportWatch(settle_s=HUNG_AFTER_S), _Channel(READY)
    watch.call_failed(endpoint, _replica(), UNAVAILABLE, channel)  # type: ignore[arg-type]
    await turns()
    channel.move(SHUTDOWN)
    await _settled(watch)
    assert endpoint.failed == []


async def test_close_ends_every_watch_at_once() -> None:
    endpoint, watch = _Endpoint(), TransportWatch(settle_s=10 * HUNG_AFTER_S)
    for name in ("r1", "r2"):
        channel = _Channel(READY)
        watch.call_failed(endpoint, _replica(name), UNAVAILABLE, channel)  # type: ignore[arg-type]
    await asyncio.wait_for(watch.close(), HUNG_AFTER_S)
    await _settled(watch)
    assert endpoint.failed == []
