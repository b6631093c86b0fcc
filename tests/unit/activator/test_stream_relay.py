"""activator.surfaces.grpc_stream_relay: one client stream of a stateful model's
sequences keeps at most one replica stream per replica, however each was opened (the model's
own, chosen by `acquire`, or one to a replica holding a sequence bound before), so the answers
of a replica's requests come back in the order that one stream gives them; and a half-close
finishes every replica stream once.

The replicas are fakes that answer each request on a stream in order; the endpoint is a fake
with real sequence routes. Events are ordered by event-loop turns (tests.fakes.loop).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

from activator.endpoint.sequence_routes import SequenceKey, SequenceRoutes
from activator.errors import ActivationFailed
from activator.observe.metrics import Metrics
from activator.surfaces.grpc_forward import GrpcForwarder
from activator.surfaces.grpc_stream_relay import StreamRelay
from tests.fakes.loop import HUNG_AFTER_S, settle, turns
from thawwire.grpc_service import pb

MODEL = "accumulator"
# A model answered one per request, in request order (not decoupled).
_ENTRY = SimpleNamespace(
    replica_completes=False,
    config=SimpleNamespace(model_transaction_policy=SimpleNamespace(decoupled=False)),
)


class _ReplicaStream:
    """A replica's end of one stream: answers each request, in order, with its id."""

    def __init__(self, replica: str) -> None:
        self.replica = replica
        self.received: list[str] = []
        self.half_closed = 0
        self._answers: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def write(self, data: bytes) -> None:
        request = pb.ModelInferRequest.FromString(data)
        self.received.append(request.id)
        answer = pb.ModelStreamInferResponse()
        answer.infer_response.id = request.id
        await self._answers.put(answer.SerializeToString())

    async def done_writing(self) -> None:
        self.half_closed += 1
        await self._answers.put(None)

    def cancel(self) -> bool:
        return False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (answer := await self._answers.get()) is not None:
            yield answer


class _Forwarder(GrpcForwarder):
    """The forwarder with its channels to replicas replaced by fake replica streams."""

    def __init__(self, fleet: Any) -> None:
        super().__init__(fleet)
        self.streams: list[_ReplicaStream] = []

    def channel(self, address: str) -> Any:
        def open_stream(**_: object) -> _ReplicaStream:
            self.streams.append(_ReplicaStream(address))
            return self.streams[-1]

        return SimpleNamespace(stream_stream=lambda _path: open_stream)

    async def stream(self, requests: AsyncIterator[bytes], context: Any) -> None:
        self.relay = StreamRelay(self, context)  # kept: a test counts the routes it keeps
        await self.relay.run(requests)

    def opened(self) -> collections.Counter[str]:
        """Replica streams opened, per replica."""
        return collections.Counter(stream.replica for stream in self.streams)


class _Endpoint:
    """A stateful model on replicas r1 and r2: a stream for a bound sequence gets a slot on
    its replica, any other on `choose`; each once `gate` is open (closed: every slot is
    busy, `acquire` holds). `gone`: a replica that left rotation after the relay last asked
    where a sequence goes (`acquire` chooses another). `slots`: the slots held now."""

    stateful = True

    def __init__(self) -> None:
        self.routes = SequenceRoutes(idle_s=60.0)
        self.choose = "r1"
        self.gate = asyncio.Event()
        self.gate.set()
        self.slots: list[str] = []
        self.gone: str | None = None
        self.refusal: Exception | None = None  # what the next unbound `acquire` raises

    def acquire(
        self, size: int, *, sequence: SequenceKey | None = None, track: bool = True
    ) -> contextlib.AbstractAsyncContextManager[Any]:
        return self._slot(sequence)

    @contextlib.asynccontextmanager
    async def _slot(self, sequence: SequenceKey | None) -> AsyncIterator[Any]:
        await self.gate.wait()
        replica = self.routes.replica_for(sequence) if sequence else None
        if replica is None and self.refusal is not None:
            refusal, self.refusal = self.refusal, None
            raise refusal
        if replica is None or replica == self.gone:
            replica = self.choose
        self.slots.append(replica)
        try:
            yield SimpleNamespace(id=replica, handle=SimpleNamespace(grpc_address=replica))
        finally:
            self.slots.remove(replica)

    def sequence_replica(self, sequence: SequenceKey) -> str | None:
        return self.routes.replica_for(sequence)

    def sequence_live(self, sequence: int) -> bool:
        return sequence in self.routes

    def sequence_sent(self, sequence: SequenceKey, replica_id: str) -> None:
        self.routes.begin(sequence, replica_id, 0.0)

    def sequence_answered(self, sequence: SequenceKey) -> None:
        self.routes.finish(sequence, 0.0)

    def begun_elsewhere(self, seq: int, replica: str) -> None:
        """A sequence another request began on `replica` (over REST, or another stream)."""
        self.routes.begin(SequenceKey(seq, True, False), replica, 0.0)
        self.routes.finish(SequenceKey(seq, True, False), 0.0)


class _Fleet:
    def __init__(self, endpoint: _Endpoint) -> None:
        self._endpoint = endpoint
        self.metrics = Metrics()
        self.config = SimpleNamespace(request_timeout_s=30.0)
        self.endpoints: dict[str, Any] = {}

    def serving(self, name: str, version: str | None = None) -> Any:
        return _ENTRY

    async def serving_now(self, name: str, version: str | None = None) -> Any:
        return self.serving(name, version)

    def endpoint(self, name: str) -> _Endpoint:
        return self._endpoint


class _Client:
    """A client's stream through the relay: messages it sends, answers (ids) it reads."""

    def __init__(self, endpoint: _Endpoint) -> None:
        self.forwarder = _Forwarder(_Fleet(endpoint))
        self.answers: list[str] = []
        self.errors: dict[str, str] = {}  # answered in-stream with an error, by request id
        self._out: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._call = asyncio.create_task(self.forwarder.stream(self._messages(), self))

    def send(self, request_id: str, seq: int, *, start: bool = False, end: bool = False) -> None:
        message = pb.ModelInferRequest(model_name=MODEL, id=request_id)
        message.parameters["sequence_id"].int64_param = seq
        message.parameters["sequence_start"].bool_param = start
        message.parameters["sequence_end"].bool_param = end
        self._out.put_nowait(message.SerializeToString())

    async def close(self) -> None:
        """Half-close, and wait for the relay to finish the call."""
        self._out.put_nowait(None)
        await asyncio.wait_for(self._call, HUNG_AFTER_S)

    async def _messages(self) -> AsyncIterator[bytes]:
        while (message := await self._out.get()) is not None:
            yield message

    # The grpc.aio servicer context the relay writes to.
    def invocation_metadata(self) -> tuple[()]:
        return ()

    def time_remaining(self) -> None:
        return None

    async def write(self, data: bytes) -> None:
        answer = pb.ModelStreamInferResponse.FromString(data)
        self.answers.append(answer.infer_response.id)
        if answer.error_message:
            self.errors[answer.infer_response.id] = answer.error_message

    async def abort(self, code: object, details: str) -> None:
        raise AssertionError(f"the stream was aborted: {code} {details}")


def _answered(client: _Client, count: int) -> Callable[[], bool]:
    return lambda: len(client.answers) == count


async def test_a_sequence_bound_to_the_replica_the_stream_goes_to_goes_on_that_stream() -> None:
    endpoint = _Endpoint()
    endpoint.begun_elsewhere(7, "r1")
    client = _Client(endpoint)
    client.send("1-start", 1, start=True)  # the model's own stream: acquire chooses r1
    await settle(_answered(client, 1))
    client.send("7-more", 7)  # bound to r1 before this stream
    client.send("1-end", 1, end=True)
    client.send("7-end", 7, end=True)
    await settle(_answered(client, 4))
    assert client.forwarder.opened() == {"r1": 1}
    assert endpoint.slots == ["r1"]  # the client stream counts once on r1
    assert client.answers == ["1-start", "7-more", "1-end", "7-end"]
    await client.close()
    assert [s.half_closed for s in client.forwarder.streams] == [1]
    assert endpoint.slots == [] and len(endpoint.routes) == 0


async def test_a_bound_message_waits_while_the_own_stream_chooses_then_joins_it() -> None:
    endpoint = _Endpoint()
    endpoint.begun_elsewhere(7, "r1")
    endpoint.gate.clear()  # every slot busy: the own stream is held in `acquire`
    client = _Client(endpoint)
    client.send("1-start", 1, start=True)
    client.send("7-more", 7)
    await turns()
    assert client.forwarder.opened() == {}  # nothing guessed while the choice is pending
    endpoint.gate.set()  # a slot frees on r1: the own stream goes there
    await settle(_answered(client, 2))
    assert client.forwarder.opened() == {"r1": 1}
    assert client.forwarder.streams[0].received == ["1-start", "7-more"]
    assert client.answers == ["1-start", "7-more"]
    await client.close()
    assert endpoint.slots == []


async def test_a_bound_message_gets_its_own_stream_when_the_own_one_goes_elsewhere() -> None:
    endpoint = _Endpoint()
    endpoint.begun_elsewhere(7, "r1")
    endpoint.choose = "r2"
    endpoint.gate.clear()
    client = _Client(endpoint)
    client.send("1-start", 1, start=True)
    client.send("7-more", 7)
    await turns()
    endpoint.gate.set()
    await settle(_answered(client, 2))
    assert client.forwarder.opened() == {"r1": 1, "r2": 1}
    by_replica = {s.replica: s.received for s in client.forwarder.streams}
    assert by_replica == {"r2": ["1-start"], "r1": ["7-more"]}
    await client.close()
    assert sorted(s.half_closed for s in client.forwarder.streams) == [1, 1]
    assert endpoint.slots == []


async def test_a_sequence_begun_on_the_stream_goes_on_its_first_replica_stream() -> None:
    endpoint = _Endpoint()
    endpoint.begun_elsewhere(7, "r1")
    endpoint.begun_elsewhere(8, "r2")
    client = _Client(endpoint)
    client.send("7-more", 7)  # a stream to r1, for the sequence bound there
    client.send("8-more", 8)  # and one to r2
    client.send("9-start", 9, start=True)  # new: on the first stream, not a third one
    client.send("9-end", 9, end=True)
    await settle(_answered(client, 4))
    assert client.forwarder.opened() == {"r1": 1, "r2": 1}
    assert sorted(endpoint.slots) == ["r1", "r2"]
    by_replica = {s.replica: s.received for s in client.forwarder.streams}
    assert by_replica == {"r1": ["7-more", "9-start", "9-end"], "r2": ["8-more"]}
    await client.close()
    assert [s.half_closed for s in client.forwarder.streams] == [1, 1]


async def test_a_sequence_continued_after_its_end_goes_on_the_stream_to_its_replica() -> None:
    """A client error (a request after END, before END is answered): the replica answers it,
    on the stream this client stream already has to it."""
    endpoint = _Endpoint()
    client = _Client(endpoint)
    client.send("5-start", 5, start=True)
    await settle(_answered(client, 1))
    client.send("5-end", 5, end=True)  # both read in one turn: END not answered yet
    client.send("5-again", 5)
    await settle(_answered(client, 3))
    assert client.forwarder.opened() == {"r1": 1}
    assert client.answers == ["5-start", "5-end", "5-again"]
    await client.close()


async def test_a_stream_opened_to_a_sequences_replica_never_lands_on_another() -> None:
    """The sequence's replica left rotation between the relay's choice and `acquire`'s: the
    message is answered in-stream (its state is gone) instead of a second stream opening to
    the replica the client stream already goes to."""
    endpoint = _Endpoint()
    endpoint.begun_elsewhere(7, "r1")
    endpoint.choose = "r2"
    client = _Client(endpoint)
    client.send("1-start", 1, start=True)
    await settle(_answered(client, 1))
    endpoint.gone = "r1"
    client.send("7-more", 7)
    await settle(_answered(client, 2))
    assert client.forwarder.opened() == {"r2": 1}
    assert client.errors == {"7-more": f"replica r1 of model '{MODEL}' is gone"}
    await client.close()
    assert endpoint.slots == []


async def test_a_bound_message_waiting_on_a_refused_own_stream_goes_on_to_its_replica() -> None:
    """The own stream's `acquire` is refused (the model did not wake in time): the message
    that waited for its choice is not held for ever; it opens the stream to its replica."""
    endpoint = _Endpoint()
    endpoint.begun_elsewhere(7, "r1")
    endpoint.gate.clear()
    endpoint.refusal = ActivationFailed(f"model '{MODEL}': not ready in time")
    client = _Client(endpoint)
    client.send("1-start", 1, start=True)
    client.send("7-more", 7)
    await turns()
    endpoint.gate.set()
    await settle(_answered(client, 2))
    assert client.errors == {"1-start": f"model '{MODEL}': not ready in time"}
    assert client.forwarder.opened() == {"r1": 1}
    assert client.forwarder.streams[0].received == ["7-more"]
    await client.close()
    assert endpoint.slots == []


async def test_a_stream_that_never_ends_its_sequences_keeps_only_the_live_ones() -> None:
    """A client stream beginning sequences it never ends: once the model's routes forgot
    them (idle), the relay forgets them too when its map next fills, instead of keeping
    every sequence the stream ever began."""
    endpoint = _Endpoint()
    client = _Client(endpoint)
    client.forwarder.fleet.config.request_timeout_s = 0.0  # no request waits here
    for seq in range(1, 1001):
        client.send(f"{seq}-start", seq, start=True)
    await settle(_answered(client, 1000))
    endpoint.routes.pinned(now=1e9)  # every one idle past the model's idle timeout
    assert len(endpoint.routes) == 0
    for seq in range(1001, 1101):  # live: the map fills (1,024) and the idle go
        client.send(f"{seq}-start", seq, start=True)
    await settle(_answered(client, 1100))
    kept = client.forwarder.relay._sequences  # what the relay routes by
    assert 1024 - 1000 <= len(kept) <= 100
    assert all(seq > 1000 for _, seq in kept)
    await client.close()
