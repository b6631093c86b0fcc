"""Forward gRPC inference calls to a model's replicas as opaque bytes, holding them while it wakes.

The gRPC twin of activator.surfaces.proxy: a `ModelInfer` message is routed on the model its
envelope names (activator.surfaces.grpc_envelope reads it without parsing a tensor), takes a slot
through the model's `ModelEndpoint.acquire` — the same held queue, activation timeout, breaker and
autoscaler input as a REST request — and goes to the replica's gRPC service unchanged; the
replica's answer (or its status) comes back unchanged.

A `ModelStreamInfer` stream may carry requests for several models: each model gets its own
stream to one of its replicas, opened at its first message (held while the model wakes), and
holding one slot on that replica until the client's stream ends — as Knative counts a stream,
one request for its whole life. Messages for a model that cannot be served (at zero and not
waking in time, a full held queue, an unknown model) are answered in-stream with Triton's
error form and the stream goes on; a replica stream that fails ends the client's stream with
its status.

A stateful model's messages (sequence batching) are routed by the sequence their parameters
name (activator.surfaces.grpc_envelope.sequence_of), as REST requests are
(activator.endpoint.sequence_routes): a `ModelInfer` of a live sequence goes to the replica that
holds it; on a stream, a message of a sequence bound to a replica goes on the client stream's
replica stream to that replica, opened if it has none — so one client stream may hold several
replica streams of one model, but never two to one replica (their answers' order would be lost)
— and a sequence the stream begins goes on its first one. The sequences a stream carries are
reported to the routes as they are sent and answered, so that a later request of them, on any
protocol, finds them.

Both calls may name shared-memory regions, which the activator owns
(activator.surfaces.shm_requests): their inputs go to the replica as raw contents, and the
outputs bound to regions come back as raw contents and are written there. On a stream, such a
request goes out under an id of the activator's own (`StreamRegions`), so that each answer,
a decoupled model's too, finds its request's regions; the client's id is given back.

Once `thaw up` shuts down (`stopping`), a new message on an open stream is answered in-stream
with STREAM_STOPPING (thawwire.grpc_messages), as `thaw serve` answers it; what is in flight is
answered as usual.

Errors the activator makes itself leave with the gRPC code of their HTTP status
(thawserver.grpc_status): 503 -> UNAVAILABLE, 504 -> DEADLINE_EXCEEDED, 404 -> NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator
from typing import Any

import grpc

from activator.endpoint.model_endpoint import ModelEndpoint
from activator.endpoint.replica import Replica
from activator.endpoint.sequence_routes import SequenceId, SequenceKey
from activator.errors import ActivatorError, BadRequest, ModelUnavailable, UpstreamFailed
from activator.fleet.fleet import Fleet
from activator.fleet.repository import ModelEntry
from activator.observe.metrics import RequestCount
from activator.surfaces.grpc_envelope import Envelope, EnvelopeError, envelope, sequence_of
from activator.surfaces.shm_requests import Rewritten, StreamRegions, grpc_answer, grpc_request
from activator.surfaces.stream_sequences import StreamSequences, answers_in_order
from thawserver.grpc_status import http_status
from thawserver.shm_registry import SystemSharedMemory
from thawwire.grpc_messages import STREAM_STOPPING, stream_error
from thawwire.grpc_service import Method, method_path
from thawwire.model_control import NOT_LOADED
from thawwire.names import canonical_version, version_refusal
from thawwire.shm_params import names_shared_memory

__all__ = ["GrpcForwarder", "forwarded_metadata", "message_version"]

logger = logging.getLogger(__name__)

# grpc.aio.ServicerContext (grpcio ships no type information).
Context = Any

_INFER = method_path(Method.MODEL_INFER)
_STREAM = method_path(Method.MODEL_STREAM_INFER)
# Messages of one model queued on a client stream while its replica stream opens; beyond it
# the client's stream is not read (gRPC flow control holds the client back).
STREAM_QUEUE = 256
# Headers that belong to one HTTP/2 hop or to grpc itself, never forwarded.
_HOP_KEYS = ("grpc-", ":")
_HOP_NAMES = frozenset({"user-agent", "content-type", "te", "host", "authority"})


def forwarded_metadata(context: Context) -> tuple[tuple[str, Any], ...]:
    """The client's metadata that goes on to the replica (not grpc's own or one hop's)."""
    return tuple(
        (key, value)
        for key, value in context.invocation_metadata() or ()
        if not key.startswith(_HOP_KEYS) and key not in _HOP_NAMES
    )


def message_version(version: str) -> str | None:
    """A message's `model_version` as Triton reads it (`01` is version 1; "" none), as thaw
    serve reads it; BadRequest (INVALID_ARGUMENT) in Triton's words for what is no version."""
    if not version:
        return None
    canonical = canonical_version(version)
    if canonical is None:
        raise BadRequest(version_refusal(version[:40]))
    return canonical


class GrpcForwarder:
    """Forwards `ModelInfer` and `ModelStreamInfer` to replicas; one channel per replica."""

    def __init__(self, fleet: Fleet, shared_memory: SystemSharedMemory | None = None) -> None:
        self._fleet = fleet
        self._channels: dict[str, grpc.aio.Channel] = {}
        # The clients' shared-memory regions (the REST surface's registry): a message that
        # names them is rewritten for the replica and its answer written back.
        self._shm = shared_memory
        self.stopping = False  # `thaw up` shuts down: open streams begin no new request

    async def close(self) -> None:
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
            for endpoint in self._fleet.endpoints.values()
            for replica in endpoint.replicas
        }
        for address in [a for a in self._channels if a not in live]:
            channel = self._channels.pop(address)
            task = asyncio.get_running_loop().create_task(channel.close())
            task.add_done_callback(lambda t: t.exception())

    def _timeout(self, context: Context) -> float:
        """A forwarded call's deadline: the client's, at most the activator's request timeout."""
        remaining = context.time_remaining()
        limit = self._fleet.config.request_timeout_s
        return limit if remaining is None or not math.isfinite(remaining) else min(remaining, limit)

    # ---- ModelInfer -------------------------------------------------------------------------

    async def infer(self, data: bytes, context: Context) -> bytes:
        """Hold if no replica slot is free (waking the model), then forward to a replica."""
        head = _envelope(data)
        fleet = self._fleet
        fleet.serving(head.model_name, message_version(head.model_version))
        endpoint = fleet.endpoint(head.model_name)
        sequence = _sequence(endpoint, data)
        shm: Rewritten | None = None
        with fleet.metrics.counting(head.model_name) as count:
            try:
                if self._shm is not None and names_shared_memory(data):
                    shm = grpc_request(data, self._shm)
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
        over HTTP (activator.surfaces.proxy.to_replica)."""
        retry = True
        while True:
            async with endpoint.acquire(len(data), sequence=sequence) as replica:
                call = self.channel(_address(replica)).unary_unary(_INFER)
                try:
                    answer: bytes = await call(
                        data if shm is None else shm.body,
                        timeout=self._timeout(context),
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
                    count.code = http_status(exc.code())
                    await context.abort(exc.code(), exc.details() or "")
                    raise AssertionError("context.abort returned") from None

    # ---- ModelStreamInfer -------------------------------------------------------------------

    async def stream(self, requests: AsyncIterator[bytes], context: Context) -> None:
        """Relay one client stream to per-model replica streams until it ends."""
        await _StreamRelay(self, context).run(requests)


def _envelope(data: bytes) -> Envelope:
    try:
        return envelope(data)
    except EnvelopeError as exc:
        raise BadRequest(f"the request could not be parsed: {exc}") from None


def _sequence(endpoint: ModelEndpoint, data: bytes) -> SequenceKey | None:
    """The sequence a stateful model's message names (None for any other model's)."""
    if not endpoint.stateful:
        return None
    try:
        return sequence_of(data)
    except EnvelopeError as exc:
        raise BadRequest(f"the request could not be parsed: {exc}") from None


def _address(replica: Replica) -> str:
    address = replica.handle.grpc_address
    if not address:
        raise UpstreamFailed(f"replica {replica.id} serves no gRPC")
    return address


class _StreamRelay:
    """One client stream: its messages to per-model replica streams, their answers back."""

    def __init__(self, forwarder: GrpcForwarder, context: Context) -> None:
        self._forwarder = forwarder
        self._fleet = forwarder._fleet
        self._context = context
        # Per model: its own replica stream, for messages no live sequence binds elsewhere.
        self._own: dict[str, _Upstream] = {}
        # Per (model, replica id): the one replica stream this client stream has to it — the
        # model's own once its replica is chosen, and those opened to replicas that hold
        # sequences bound before. Never two to one replica: their answers' order would be lost.
        self._on_replica: dict[tuple[str, str], _Upstream] = {}
        # A stateful model's sequences: the replica stream each went to on this client stream.
        self._sequences: dict[tuple[str, SequenceId], _Upstream] = {}
        self.regions = StreamRegions()  # requests whose outputs go to shared-memory regions
        self._write_lock = asyncio.Lock()
        self._failed: asyncio.Future[grpc.aio.AioRpcError] = (
            asyncio.get_running_loop().create_future()
        )

    async def run(self, requests: AsyncIterator[bytes]) -> None:
        reading = asyncio.ensure_future(self._read(requests))
        try:
            waits: set[asyncio.Future[Any]] = {reading, self._failed}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if not self._failed.done():
                reading.result()  # the client half-closed: let every replica stream finish
                for upstream in self.upstreams():
                    await upstream.end()
                tasks: set[asyncio.Future[Any]] = {u.task for u in self.upstreams()}
                while tasks and not self._failed.done():
                    _, tasks = await asyncio.wait(
                        {*tasks, self._failed}, return_when=asyncio.FIRST_COMPLETED
                    )
                    tasks.discard(self._failed)
            if self._failed.done():
                exc = self._failed.result()
                await self._context.abort(exc.code(), exc.details() or "")
        finally:
            pending = [reading, *(u.task for u in self.upstreams())]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            self.regions.close()

    async def _read(self, requests: AsyncIterator[bytes]) -> None:
        shm = self._forwarder._shm
        async for data in requests:
            head = Envelope("", "", "")
            try:
                head = _envelope(data)
                if self._forwarder.stopping:
                    raise ModelUnavailable(STREAM_STOPPING)
                entry = self._fleet.serving(head.model_name, message_version(head.model_version))
                endpoint = self._fleet.endpoint(head.model_name)
                sequence = _sequence(endpoint, data)
                if shm is not None and names_shared_memory(data):
                    data = self.regions.request(data, shm)
            except ActivatorError as exc:
                await self.answer_error(head, exc, count=1)  # with its id, when it has one
                continue
            upstream = await self._upstream(head.model_name, entry, endpoint, sequence)
            await upstream.send(data, head, sequence)

    async def _upstream(
        self,
        model: str,
        entry: ModelEntry,
        endpoint: ModelEndpoint,
        sequence: SequenceKey | None,
    ) -> _Upstream:
        """The replica stream a message goes on: its sequence's, when this client stream has
        sent the sequence before; the one to the replica the sequence is bound to, when
        another request bound it there; else the model's own."""
        upstream: _Upstream | None = None
        if sequence is not None:
            upstream = _open(self._sequences.get((model, sequence.id)))
            bound = endpoint.sequence_replica(sequence) if upstream is None else None
            if bound is not None:
                upstream = await self._to_replica(model, bound, entry, sequence)
        if upstream is None:
            upstream = self._own_stream(model, entry, sequence)
        if sequence is not None:
            if sequence.end:  # its next request is a new sequence's START: routed afresh
                self._sequences.pop((model, sequence.id), None)
            else:
                self._sequences[(model, sequence.id)] = upstream
        return upstream

    async def _to_replica(
        self, model: str, replica: str, entry: ModelEntry, sequence: SequenceKey
    ) -> _Upstream:
        """The stream to `replica`, opened now if this client stream has none to it.

        While the model's own stream is still choosing its replica (`acquire` holds it), the
        message waits for that choice, and so does the rest of the client stream behind it:
        the own stream may land on `replica`, and a second stream to it would lose the order
        of their answers. Deciding without waiting would need the relay to predict
        `acquire`'s choice. The wait is short in practice: a bound sequence means the model
        has a live replica, so only a wait for a free slot can hold the own stream."""
        own = _open(self._own.get(model))
        if own is not None and own.replica is None:
            await own.placed.wait()
        upstream = _open(self._on_replica.get((model, replica)))
        if upstream is None:
            in_order = answers_in_order(entry)
            upstream = _Upstream(self, model, sequence, in_order, replica=replica)
            self._on_replica[(model, replica)] = upstream
        return upstream

    def _own_stream(self, model: str, entry: ModelEntry, sequence: SequenceKey | None) -> _Upstream:
        """The model's own stream; when it has none open, the first open stream to one of its
        replicas becomes it (a new sequence may begin on any), else one is opened, whose
        replica `acquire` chooses. So the own stream only chooses its replica while it is the
        model's only one, and cannot land where another already goes."""
        own = _open(self._own.get(model))
        if own is None:
            streams = (u for (m, _), u in self._on_replica.items() if m == model)
            own = next((u for u in streams if not u.closed), None)
            if own is None:
                own = _Upstream(self, model, sequence, answers_in_order(entry))
            self._own[model] = own
        return own

    def placed(self, upstream: _Upstream, model: str, replica: str) -> None:
        """`upstream`, the model's own, now goes to `replica`: later messages for sequences
        bound there go on it. (No other stream of the model opened while it chose:
        `_to_replica` waits.)"""
        if _open(self._on_replica.get((model, replica))) is None:
            self._on_replica[(model, replica)] = upstream

    def upstreams(self) -> list[_Upstream]:
        """Every replica stream this client stream opened, each once (the model's own is also
        listed under its replica once chosen)."""
        return list(dict.fromkeys([*self._own.values(), *self._on_replica.values()]))

    async def write(self, data: bytes) -> None:
        async with self._write_lock:
            with contextlib.suppress(asyncio.InvalidStateError):  # the call already ended
                await self._context.write(data)

    async def answer_error(self, head: Envelope, exc: ActivatorError, *, count: int) -> None:
        """Answer `count` requests in-stream with `exc` (Triton's form; the stream goes on)."""
        answer = stream_error(
            exc.message,
            request_id=head.id,
            model_name=head.model_name,
            model_version=head.model_version,
        ).SerializeToString()
        for _ in range(count):
            await self.write(answer)

    def fail(self, exc: grpc.aio.AioRpcError) -> None:
        if not self._failed.done():
            self._failed.set_result(exc)

    def timeout(self) -> float:
        return self._forwarder._timeout(self._context)

    def channel(self, address: str) -> grpc.aio.Channel:
        return self._forwarder.channel(address)

    @property
    def metadata(self) -> tuple[tuple[str, Any], ...]:
        return forwarded_metadata(self._context)


_Queued = tuple[bytes, Envelope, SequenceKey | None]


class _Upstream:
    """One model's stream to one of its replicas, for one client stream. `sequence`: the
    first message's sequence, which chooses the replica (the one it is bound to, or the one
    with the fewest live sequences); every sequence's requests on it are reported to the
    model's sequence routes (`StreamSequences`). `replica`: the replica it goes to — given
    for a stream opened to a sequence's replica, known once `acquire` chose it for a model's
    own (`placed` is set then, or when the stream is refused)."""

    def __init__(
        self,
        relay: _StreamRelay,
        model: str,
        sequence: SequenceKey | None,
        in_order: bool,
        *,
        replica: str | None = None,
    ) -> None:
        self._relay = relay
        self._model = model
        self._sequence = sequence
        self._in_order = in_order
        self.replica = replica
        self.placed = asyncio.Event()
        self._queue: asyncio.Queue[_Queued | None] = asyncio.Queue(STREAM_QUEUE)
        self.closed = False  # the model refused this stream: a new message needs a new one
        self._refusal: ActivatorError | None = None
        self.task = asyncio.create_task(self._run())

    async def send(self, data: bytes, head: Envelope, sequence: SequenceKey | None) -> None:
        """Queue a message (waits while STREAM_QUEUE messages wait for the replica stream)."""
        await self._queue.put((data, head, sequence))
        if self._refusal is not None:  # refused while we waited: answer what is left
            await self._refuse_queued(self._refusal)

    async def end(self) -> None:
        """The client half-closed: finish the replica stream after what is queued."""
        if not self.closed:
            await self._queue.put(None)

    async def _run(self) -> None:
        fleet = self._relay._fleet
        endpoint = fleet.endpoint(self._model)
        with fleet.metrics.counting(self._model) as count:
            try:
                async with endpoint.acquire(0, sequence=self._sequence, track=False) as replica:
                    self._place(replica.id)
                    call = self._relay.channel(_address(replica)).stream_stream(_STREAM)(
                        timeout=self._relay.timeout(), metadata=self._relay.metadata
                    )
                    sent = (
                        StreamSequences(endpoint, replica.id, self._in_order)
                        if endpoint.stateful
                        else None
                    )
                    try:
                        count.code = await self._relay_call(call, sent)
                    finally:
                        if sent is not None:
                            sent.close()
            except ActivatorError as exc:
                count.refused(exc)
                await self._refuse_queued(exc)
            finally:
                self.placed.set()  # refused: a message waiting for its choice goes on

    def _place(self, replica_id: str) -> None:
        """`acquire` chose `replica_id`. A stream opened to a sequence's replica goes there
        only: another (its replica left rotation a moment ago) is refused, and the next
        message is routed afresh, instead of becoming a second stream to that one."""
        if self.replica is None:
            self.replica = replica_id
            self._relay.placed(self, self._model, replica_id)
        elif self.replica != replica_id:
            raise UpstreamFailed(f"replica {self.replica} of model '{self._model}' is gone")
        self.placed.set()

    async def _relay_call(self, call: Any, sent: StreamSequences | None) -> int:
        """Writes queued messages and relays answers until both sides are done; the HTTP
        status the stream counts as."""
        writer = asyncio.ensure_future(self._write_all(call, sent))
        try:
            async for answer in call:
                if sent is not None:
                    sent.answered()
                await self._relay.write(self._relay.regions.answer(answer))
            await writer
        except grpc.aio.AioRpcError as exc:
            self._relay.fail(exc)
            return http_status(exc.code())
        finally:
            call.cancel()  # a no-op once the call is done; else the client went away
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await writer
        return 200

    async def _write_all(self, call: Any, sent: StreamSequences | None) -> None:
        while (item := await self._queue.get()) is not None:
            data, _, sequence = item
            if sent is not None:
                sent.sent(sequence)
            await call.write(data)
        await call.done_writing()

    async def _refuse_queued(self, exc: ActivatorError) -> None:
        """The model cannot take this stream now: answer what waits for it, and let a later
        message try again with a new replica stream."""
        self.closed, self._refusal = True, exc
        while True:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            if item is not None:
                await self._relay.answer_error(item[1], exc, count=1)


def _open(upstream: _Upstream | None) -> _Upstream | None:
    """`upstream`, unless the model refused it (a new message needs a new one then)."""
    return None if upstream is None or upstream.closed else upstream


def _not_loaded(exc: grpc.aio.AioRpcError, model: str) -> bool:
    """The replica's error says it does not have `model` loaded (thawwire.model_control)."""
    return any(key == NOT_LOADED and value == model for key, value in exc.trailing_metadata() or ())
