"""activator.surfaces.grpc_forward and grpc_stream_relay: a replica whose gRPC connection fails
under a call (refused, or its server gone mid-call) leaves rotation at once, as one that
resets a REST request does; a replica that answers UNAVAILABLE itself (a full queue) stays.
The forwarder decides in the background once its channel has settled (grpc may say the channel
left READY a moment after the call's error), so each test waits for that before it looks.

The replicas are real grpc.aio servers on loopback and the forwarder's channels are real; the
endpoint is a fake that hands out one replica and records what it is told of it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from activator.observe.metrics import Metrics
from activator.surfaces.grpc_forward import GrpcForwarder
from tests.fakes.loop import HUNG_AFTER_S
from thawwire.grpc_service import SERVICE, pb

MODEL = "add_sub"
_ENTRY = SimpleNamespace(
    replica_completes=False,
    config=SimpleNamespace(model_transaction_policy=SimpleNamespace(decoupled=False)),
)


class _Replica:
    """A replica's gRPC service: a request whose id is "hang" is never answered, "busy" is
    refused with UNAVAILABLE as a full queue is, any other is answered with its id."""

    def __init__(self) -> None:
        self.server = grpc.aio.server()
        self.hanging = asyncio.Event()  # a "hang" request arrived
        handlers = {
            "ModelInfer": grpc.unary_unary_rpc_method_handler(self._infer),
            "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(self._stream),
        }
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, handlers),)
        )
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"

    async def _answer(self, data: bytes, context: Any) -> bytes:
        request = pb.ModelInferRequest.FromString(data)
        if request.id == "hang":
            self.hanging.set()
            await asyncio.Event().wait()
        if request.id == "busy":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "Exceeds maximum queue size")
        return pb.ModelInferResponse(model_name=MODEL, id=request.id).SerializeToString()

    async def _infer(self, data: bytes, context: Any) -> bytes:
        return await self._answer(data, context)

    async def _stream(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for data in requests:
            answer = pb.ModelInferResponse.FromString(await self._answer(data, context))
            yield pb.ModelStreamInferResponse(infer_response=answer).SerializeToString()


class _Endpoint:
    """One model on one replica; `failed`: what `replica_failed` was told."""

    stateful = False

    def __init__(self, address: str) -> None:
        self.replica = SimpleNamespace(id="r1", handle=SimpleNamespace(grpc_address=address))
        self.failed: list[str] = []

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[Any]:
        yield self.replica

    def acquire(self, size: int, **_: object) -> contextlib.AbstractAsyncContextManager[Any]:
        return self._slot()

    def replica_failed(self, replica: Any, reason: str) -> None:
        assert replica is self.replica
        self.failed.append(reason)


class _Fleet:
    def __init__(self, endpoint: _Endpoint) -> None:
        self._endpoint = endpoint
        self.metrics = Metrics()
        self.config = SimpleNamespace(request_timeout_s=HUNG_AFTER_S)
        self.endpoints: dict[str, Any] = {}

    def serving(self, name: str, version: str | None = None) -> Any:
        return _ENTRY

    async def serving_now(self, name: str, version: str | None = None) -> Any:
        return self.serving(name, version)

    def endpoint(self, name: str) -> _Endpoint:
        return self._endpoint


class _Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code


class _Context:
    """The grpc.aio servicer context of the client's call."""

    def __init__(self) -> None:
        self.answers: list[str] = []

    def invocation_metadata(self) -> tuple[()]:
        return ()

    def time_remaining(self) -> None:
        return None

    async def write(self, data: bytes) -> None:
        self.answers.append(pb.ModelStreamInferResponse.FromString(data).infer_response.id)

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Aborted(code, details)


@contextlib.asynccontextmanager
async def _serving() -> AsyncIterator[tuple[_Replica, _Endpoint, GrpcForwarder]]:
    replica = _Replica()
    await replica.server.start()
    endpoint = _Endpoint(replica.address)
    forwarder = GrpcForwarder(_Fleet(endpoint))  # type: ignore[arg-type]
    try:
        yield replica, endpoint, forwarder
    finally:
        await forwarder.close()
        await replica.server.stop(0)


async def _infer(forwarder: GrpcForwarder, request_id: str) -> bytes:
    message = pb.ModelInferRequest(model_name=MODEL, id=request_id).SerializeToString()
    return await asyncio.wait_for(forwarder.infer(message, _Context()), HUNG_AFTER_S)


async def test_a_replica_that_answers_unavailable_itself_stays_in_rotation() -> None:
    async with _serving() as (_, endpoint, forwarder):
        with pytest.raises(_Aborted, match="Exceeds maximum queue size") as refused:
            await _infer(forwarder, "busy")
        assert refused.value.code == grpc.StatusCode.UNAVAILABLE
        answer = pb.ModelInferResponse.FromString(await _infer(forwarder, "after"))
        assert answer.id == "after"
        await forwarder.transport.settled()
        assert endpoint.failed == []


async def test_a_replica_whose_connection_is_refused_leaves_rotation() -> None:
    async with _serving() as (replica, endpoint, forwarder):
        await _infer(forwarder, "first")  # the channel is connected
        await replica.server.stop(0)
        with pytest.raises(_Aborted) as refused:
            await _infer(forwarder, "second")
        assert refused.value.code == grpc.StatusCode.UNAVAILABLE
        await forwarder.transport.settled()
        assert len(endpoint.failed) == 1
        assert endpoint.failed[0].startswith("gRPC transport: ")


async def test_a_replica_gone_under_a_call_leaves_rotation() -> None:
    async with _serving() as (replica, endpoint, forwarder):
        call = asyncio.ensure_future(_infer(forwarder, "hang"))
        await asyncio.wait_for(replica.hanging.wait(), HUNG_AFTER_S)
        await replica.server.stop(0)
        with pytest.raises(_Aborted) as gone:
            await call
        assert gone.value.code == grpc.StatusCode.UNAVAILABLE
        await forwarder.transport.settled()
        assert len(endpoint.failed) == 1


async def _stream(forwarder: GrpcForwarder, ids: list[str], context: _Context) -> None:
    async def messages() -> AsyncIterator[bytes]:
        for request_id in ids:
            yield pb.ModelInferRequest(model_name=MODEL, id=request_id).SerializeToString()

    await asyncio.wait_for(forwarder.stream(messages(), context), HUNG_AFTER_S)


async def test_a_stream_whose_replica_goes_away_takes_it_out_of_rotation() -> None:
    async with _serving() as (replica, endpoint, forwarder):
        context = _Context()
        stream = asyncio.ensure_future(_stream(forwarder, ["one", "hang"], context))
        await asyncio.wait_for(replica.hanging.wait(), HUNG_AFTER_S)
        await replica.server.stop(0)
        with pytest.raises(_Aborted) as gone:
            await stream
        assert gone.value.code == grpc.StatusCode.UNAVAILABLE
        assert context.answers == ["one"]
        await forwarder.transport.settled()
        assert len(endpoint.failed) == 1


async def test_a_stream_the_replica_refuses_itself_leaves_it_in_rotation() -> None:
    async with _serving() as (_, endpoint, forwarder):
        context = _Context()
        with pytest.raises(_Aborted, match="Exceeds maximum queue size"):
            await _stream(forwarder, ["one", "busy"], context)
        assert context.answers == ["one"]
        await _stream(forwarder, ["again"], context)
        assert context.answers == ["one", "again"]
        await forwarder.transport.settled()
        assert endpoint.failed == []
