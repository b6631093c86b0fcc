"""Forward gRPC inference calls to a model's replicas as opaque bytes, holding them while it wakes.

The gRPC twin of activator.surfaces.proxy: a `ModelInfer` message is routed on the model its
envelope names (activator.surfaces.grpc_envelope reads it without parsing a tensor), takes a slot
through the model's `ModelEndpoint.acquire` — the same held queue, activation timeout, breaker and
autoscaler input as a REST request — and goes to the replica's gRPC service unchanged; the
replica's answer (or its status) comes back unchanged.

A `ModelStreamInfer` stream is relayed by activator.surfaces.grpc_stream_relay, per model to
replica streams. A stateful model's `ModelInfer` (sequence batching) is routed by the sequence
its parameters name (activator.surfaces.grpc_envelope.sequence_of), as REST requests are
(activator.endpoint.sequence_routes): a request of a live sequence goes to the replica that
holds it.

A message may name shared-memory regions, which the activator owns
(activator.surfaces.shm_requests): its inputs go to the replica as raw contents, and the
outputs bound to regions come back as raw contents and are written there.

A replica whose connection fails under a call (refused, reset, or its server going away)
leaves rotation (activator.surfaces.grpc_transport), as one that resets a REST request does
(activator.surfaces.proxy); the call ends with grpc's UNAVAILABLE, as that request ends with
a 502.

Errors the activator makes itself leave with the gRPC code of their HTTP status
(thawserver.grpc_status): 503 -> UNAVAILABLE, 504 -> DEADLINE_EXCEEDED, 404 -> NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator

import grpc

from activator.endpoint.model_endpoint import ModelEndpoint
from activator.endpoint.sequence_routes import SequenceKey
from activator.fleet.fleet import Fleet
from activator.observe.metrics import RequestCount
from activator.surfaces.grpc_calls import (
    Context,
    forwarded_metadata,
    message_sequence,
    message_version,
    read_envelope,
    replica_address,
)
from activator.surfaces.grpc_stream_relay import StreamRelay
from activator.surfaces.grpc_transport import TransportWatch
from activator.surfaces.shm_requests import Rewritten, grpc_answer, grpc_request
from thawserver.grpc_status import http_status
from thawserver.shm_registry import SystemSharedMemory
from thawwire.grpc_service import Method, method_path
from thawwire.model_control import NOT_LOADED
from thawwire.shm_params import names_shared_memory

__all__ = ["GrpcForwarder"]

logger = logging.getLogger(__name__)

_INFER = method_path(Method.MODEL_INFER)


class GrpcForwarder:
    """Forwards `ModelInfer` and `ModelStreamInfer` to replicas; one channel per replica."""

    def __init__(self, fleet: Fleet, shared_memory: SystemSharedMemory | None = None) -> None:
        self.fleet = fleet
        self._channels: dict[str, grpc.aio.Channel] = {}
        # The clients' shared-memory regions (the REST surface's registry): a message that
        # names them is rewritten for the replica and its answer written back.
        self.shared_memory = shared_memory
        self.stopping = False  # `thaw up` shuts down: open streams begin no new request
        # Replicas whose connection ended under a call leave rotation (ModelInfer and streams).
        self.transport = TransportWatch()

    async def close(self) -> None:
        await self.transport.close()
        channels, self._channels = list(self._channels.values()), {}
        await asyncio.gather(*(channel.close() for channel in channels), return_exceptions=True)

    def channel(self, address: str) -> grpc.aio.Channel:
        """The channel to a replica's gRPC service (made on first use; gone replicas' closed)."""
        channel = self._channels.get(address)
        if channel is None:
            self._prune()
            channel = self._channels[address] = grpc.aio.insecure_channel(
                address,
                options=[
                    # The activator caps what it accepts; replicas' answers are not capped.
                    ("grpc.max_receive_message_length", -1),
                    ("grpc.max_send_message_length", -1),
                ],
            )
        return channel

    def _prune(self) -> None:
        """Close the channels of replicas that no endpoint has any more."""
        live = {
            replica.handle.grpc_address
            for endpoint in self.fleet.endpoints.values()
            for replica in endpoint.replicas
        }
        for address in [a for a in self._channels if a not in live]:
            channel = self._channels.pop(address)
            task = asyncio.get_running_loop().create_task(channel.close())
            task.add_done_callback(lambda t: t.exception())

    def timeout(self, context: Context) -> float:
        """A forwarded call's deadline: the client's, at most the activator's request timeout."""
        remaining = context.time_remaining()
        limit = self.fleet.config.request_timeout_s
        return limit if remaining is None or not math.isfinite(remaining) else min(remaining, limit)

    # ---- ModelInfer -------------------------------------------------------------------------

    async def infer(self, data: bytes, context: Context) -> bytes:
        """Hold if no replica slot is free (waking the model), then forward to a replica."""
        head = read_envelope(data)
        fleet = self.fleet
        await fleet.serving_now(head.model_name, message_version(head.model_version))
        endpoint = fleet.endpoint(head.model_name)
        sequence = message_sequence(endpoint, data)
        shm: Rewritten | None = None
        with fleet.metrics.counting(head.model_name) as count:
            try:
                if self.shared_memory is not None and names_shared_memory(data):
                    shm = grpc_request(data, self.shared_memory)
                answer = await self._to_replica(
                    endpoint, head.model_name, data, shm, context, count, sequence
                )
                if shm is not None:
                    answer = grpc_answer(answer, shm)
            finally:
                if shm is not None:
                    shm.release()
            count.code = 200
            return answer

    async def _to_replica(
        self,
        endpoint: ModelEndpoint,
        model: str,
        data: bytes,
        shm: Rewritten | None,
        context: Context,
        count: RequestCount,
        sequence: SequenceKey | None,
    ) -> bytes:
        """The answer of a replica of `endpoint`, held for; a replica's error ends the call
        with it. A request of a live sequence goes to the replica that holds it. A replica
        that says it does not have `model` loaded (NOT_LOADED: evicted or unloaded after this
        activator last heard) leaves rotation and the request goes once more to another, as
        over HTTP (activator.surfaces.proxy.to_replica); one whose connection failed leaves
        rotation too, and the call ends with its UNAVAILABLE (it may have run there)."""
        retry = True
        while True:
            async with endpoint.acquire(len(data), sequence=sequence) as replica:
                channel = self.channel(replica_address(replica))
                call = channel.unary_unary(_INFER)
                try:
                    answer: bytes = await call(
                        data if shm is None else shm.body,
                        timeout=self.timeout(context),
                        metadata=forwarded_metadata(context),
                    )
                    return answer
                except grpc.aio.AioRpcError as exc:
                    if _not_loaded(exc, model):
                        endpoint.replica_failed(replica, f"model '{model}' is not loaded there")
                        if retry:
                            logger.info("model=%s not on replica %s: sent again", model, replica.id)
                            retry = False
                            continue
                    else:
                        self.transport.call_failed(endpoint, replica, exc, channel)
                    count.code = http_status(exc.code())
                    await context.abort(exc.code(), exc.details() or "")
                    raise AssertionError("context.abort returned") from None

    # ---- ModelStreamInfer -------------------------------------------------------------------

    async def stream(self, requests: AsyncIterator[bytes], context: Context) -> None:
        """Relay one client stream to per-model replica streams until it ends."""
        await StreamRelay(self, context).run(requests)


def _not_loaded(exc: grpc.aio.AioRpcError, model: str) -> bool:
    """The replica's error says it does not have `model` loaded (thawwire.model_control)."""
    return any(key == NOT_LOADED and value == model for key, value in exc.trailing_metadata() or ())
