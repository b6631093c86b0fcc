"""Whether a forwarded gRPC call failed because its replica's connection did, and taking that
replica out of rotation when it did.

A call to a replica that ends with UNAVAILABLE is one of two things: the replica answered so
itself (a full queue, a model not ready), and its connection stays READY; or its connection
ended under the call (refused, reset, or its server sent GOAWAY as it went away), and the
channel leaves READY. The channel's state is grpc's documented connectivity, where the error's
words are not. But grpc sets that state on its own thread: the call's error can reach the
event loop a few milliseconds before the channel says it is no longer READY (GOAWAY, seen 5
times in 300 under three CPU burners). So a channel still READY is watched for a moment
(`SETTLE_S`) in the background — the client's answer never waits for it — and the replica
leaves rotation if the channel leaves READY within it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc

from activator.endpoint.model_endpoint import ModelEndpoint
from activator.endpoint.replica import Replica

__all__ = ["SETTLE_S", "TransportWatch"]

logger = logging.getLogger(__name__)

# How long a channel still READY after a call's UNAVAILABLE is watched for leaving READY. grpc
# moved it within 6 ms under three CPU burners; a replica's own refusal costs only one idle
# watch per replica for this long, never the client's answer.
SETTLE_S = 1.0


class TransportWatch:
    """Takes a replica out of rotation when a call to it ended with its connection (the
    forwarder's one, shared by `ModelInfer` and `ModelStreamInfer`)."""

    def __init__(self, settle_s: float = SETTLE_S) -> None:
        self._settle_s = settle_s
        # At most one watch per model's replica (keyed by the endpoint's identity and the
        # replica's id: a runtime shared by several models is a replica of each): a full queue
        # refusing a burst costs one.
        self._watching: dict[tuple[int, str], asyncio.Task[None]] = {}

    def call_failed(
        self,
        endpoint: ModelEndpoint,
        replica: Replica,
        exc: grpc.aio.AioRpcError,
        channel: grpc.aio.Channel,
    ) -> None:
        """A call to `replica` over `channel` ended with `exc`: if its connection ended, the
        replica leaves rotation (now, or once the channel says so within SETTLE_S)."""
        if exc.code() != grpc.StatusCode.UNAVAILABLE:
            return
        reason = f"gRPC transport: {exc.details()}"
        if channel.get_state(try_to_connect=False) != grpc.ChannelConnectivity.READY:
            endpoint.replica_failed(replica, reason)
            return
        key = (id(endpoint), replica.id)  # the task holds `endpoint`: its id is not reused
        if key in self._watching:
            return
        settle = self._settle(endpoint, replica, channel, reason)
        task = asyncio.get_running_loop().create_task(settle)
        self._watching[key] = task
        task.add_done_callback(lambda _: self._watching.pop(key, None))

    async def _settle(
        self, endpoint: ModelEndpoint, replica: Replica, channel: grpc.aio.Channel, reason: str
    ) -> None:
        try:
            await asyncio.wait_for(
                channel.wait_for_state_change(grpc.ChannelConnectivity.READY), self._settle_s
            )
        except TimeoutError:
            return  # still READY: the replica answered UNAVAILABLE itself
        except (grpc.aio.UsageError, RuntimeError):
            # The channel was closed under the watch (its replica gone, or the activator
            # stopping), or grpc's watch failed: nothing is known of the connection.
            logger.debug("replica %s: channel watch ended", replica.id, exc_info=True)
            return
        if channel.get_state(try_to_connect=False) == grpc.ChannelConnectivity.SHUTDOWN:
            return  # closed by the forwarder (its replica gone or the activator stopping)
        endpoint.replica_failed(replica, reason)

    async def settled(self) -> None:
        """Wait until every watch has ended (tests, and `close`)."""
        while self._watching:
            await asyncio.gather(*self._watching.values(), return_exceptions=True)

    async def close(self) -> None:
        """End every watch (the forwarder is closing)."""
        for task in list(self._watching.values()):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.settled()
