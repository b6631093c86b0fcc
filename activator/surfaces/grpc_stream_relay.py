"""One client `ModelStreamInfer` stream through `thaw up`, relayed to per-model replica streams.

A stream may carry requests for several models: each model gets its own stream to one of its
replicas, opened at its first message (held while the model wakes), and holding one slot on
that replica until the client's stream ends — as Knative counts a stream, one request for its
whole life. Messages for a model that cannot be served (at zero and not waking in time, a full
held queue, an unknown model) are answered in-stream with Triton's error form and the stream
goes on; a replica stream that fails ends the client's stream with its status.

A stateful model's messages (sequence batching) are routed by the sequence their parameters
name (activator.surfaces.grpc_envelope.sequence_of): a message of a sequence bound to a replica
goes on the client stream's replica stream to that replica, opened if it has none — so one
client stream may hold several replica streams of one model, but never two to one replica
(their answers' order would be lost) — and a sequence the stream begins goes on its first one.
The sequences a stream carries are reported to the routes as they are sent and answered
(activator.surfaces.stream_sequences), so that a later request of them, on any protocol, finds
them.

A request naming shared-memory regions goes out under an id of the activator's own
(`StreamRegions`), so that each answer, a decoupled model's too, finds its request's regions;
the client's id is given back. Once `thaw up` shuts down (`Forwarding.stopping`), a new message
on an open stream is answered in-stream with STREAM_STOPPING, as `thaw serve` answers it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol

import grpc

from activator.endpoint.model_endpoint import ModelEndpoint
from activator.endpoint.sequence_routes import SequenceId, SequenceKey
from activator.errors import ActivatorError, ModelUnavailable, UpstreamFailed
from activator.fleet.fleet import Fleet
from activator.fleet.repository import ModelEntry
from activator.surfaces.grpc_calls import (
    Context,
    forwarded_metadata,
    message_sequence,
    message_version,
    read_envelope,
    replica_address,
)
from activator.surfaces.grpc_envelope import Envelope
from activator.surfaces.grpc_transport import TransportWatch
from activator.surfaces.shm_requests import StreamRegions
from activator.surfaces.stream_sequences import StreamSequences, answers_in_order
from thawserver.grpc_status import http_status
from thawserver.shm_registry import SystemSharedMemory
from thawwire.grpc_messages import STREAM_STOPPING, stream_error
from thawwire.grpc_service import Method, method_path
from thawwire.shm_params import names_shared_memory

__all__ = ["STREAM_QUEUE", "Forwarding", "StreamRelay"]

_STREAM = method_path(Method.MODEL_STREAM_INFER)
# Messages of one model queued on a client stream while its replica stream opens; beyond it
# the client's stream is not read (gRPC flow control holds the client back).
STREAM_QUEUE = 256
# Sequences a client stream keeps routes for before it looks for ones to forget (then twice
# as many as it kept).
_SEQUENCES_KEPT = 1024


class Forwarding(Protocol):
    """What a relay uses of the forwarder (activator.surfaces.grpc_forward.GrpcForwarder)."""

    fleet: Fleet
    shared_memory: SystemSharedMemory | None
    stopping: bool
    transport: TransportWatch

    def channel(self, address: str) -> grpc.aio.Channel: ...

    def timeout(self, context: Context) -> float: ...


class StreamRelay:
    """One client stream: its messages to per-model replica streams, their answers back."""

    def __init__(self, forwarder: Forwarding, context: Context) -> None:
        self._forwarder = forwarder
        self._fleet = forwarder.fleet
        self._context = context
        # Per model: its own replica stream, for messages no live sequence binds elsewhere.
        self._own: dict[str, _Upstream] = {}
        # Per (model, replica id): the one replica stream this client stream has to it — the
        # model's own once its replica is chosen, and those opened to replicas that hold
        # sequences bound before. Never two to one replica: their answers' order would be lost.
        self._on_replica: dict[tuple[str, str], _Upstream] = {}
        # A stateful model's sequences: the replica stream each went to on this client stream,
        # and when (loop time) it last sent one of its requests.
        self._sequences: dict[tuple[str, SequenceId], tuple[_Upstream, float]] = {}
        self._forget_at = _SEQUENCES_KEPT
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
        shm = self._forwarder.shared_memory
        async for data in requests:
            head = Envelope("", "", "")
            try:
                head = read_envelope(data)
                if self._forwarder.stopping:
                    raise ModelUnavailable(STREAM_STOPPING)
                version = message_version(head.model_version)
                entry = await self._fleet.serving_now(head.model_name, version)
                endpoint = self._fleet.endpoint(head.model_name)
                sequence = message_sequence(endpoint, data)
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
            sent = self._sequences.get((model, sequence.id))
            upstream = _open(sent[0]) if sent is not None else None
            bound = endpoint.sequence_replica(sequence) if upstream is None else None
            if bound is not None:
                upstream = await self._to_replica(model, bound, entry, sequence)
        if upstream is None:
            upstream = self._own_stream(model, entry, sequence)
        if sequence is not None:
            if sequence.end:  # its next request is a new sequence's START: routed afresh
                self._sequences.pop((model, sequence.id), None)
            else:
                now = asyncio.get_running_loop().time()
                self._sequences[(model, sequence.id)] = (upstream, now)
                if len(self._sequences) >= self._forget_at:
                    self._forget_idle(now)
        return upstream

    def _forget_idle(self, now: float) -> None:
        """Forget the sequences the model's routes forgot (idle past its
        `max_sequence_idle_microseconds`, or their replica gone) that this stream has not sent
        a request of for longer than a request may wait here, so none is still queued: a
        stream that begins sequences and never ends them keeps the live ones, not every one
        it ever began."""
        quiet_since = now - self.timeout()
        kept = {
            key: sent
            for key, sent in self._sequences.items()
            if sent[1] > quiet_since or self._live(*key)
        }
        self._sequences = kept
        self._forget_at = max(_SEQUENCES_KEPT, 2 * len(kept))

    def _live(self, model: str, sequence: SequenceId) -> bool:
        try:
            return self._fleet.endpoint(model).sequence_live(sequence)
        except ActivatorError:  # the model is gone: so are its sequences
            return False

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
        return self._forwarder.timeout(self._context)

    def channel(self, address: str) -> grpc.aio.Channel:
        return self._forwarder.channel(address)

    @property
    def transport(self) -> TransportWatch:
        return self._forwarder.transport

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
        relay: StreamRelay,
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
                    channel = self._relay.channel(replica_address(replica))
                    call = channel.stream_stream(_STREAM)(
                        timeout=self._relay.timeout(), metadata=self._relay.metadata
                    )
                    sent = (
                        StreamSequences(endpoint, replica.id, self._in_order)
                        if endpoint.stateful
                        else None
                    )
                    try:
                        count.code = await self._relay_call(call, sent)
                    except grpc.aio.AioRpcError as exc:
                        # as a failed ModelInfer's replica
                        self._relay.transport.call_failed(endpoint, replica, exc, channel)
                        self._relay.fail(exc)
                        count.code = http_status(exc.code())
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
        """Writes queued messages and relays answers until both sides are done (200, the
        status the stream counts as; the replica's error is raised)."""
        writer = asyncio.ensure_future(self._write_all(call, sent))
        try:
            async for answer in call:
                if sent is not None:
                    sent.answered()
                await self._relay.write(self._relay.regions.answer(answer))
            await writer
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
