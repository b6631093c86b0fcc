"""The standard gRPC health service beside `GRPCInferenceService` (thawserver.grpc_routes): Check
answers the surface's own readiness whatever service it names, behind the `health` restriction;
Watch is not served; bytes that are not a HealthCheckRequest are INVALID_ARGUMENT."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2

from thawserver.grpc_routes import service_handler
from thawserver.restricted_protocols import Category, Restriction
from thawwire.grpc_service import Method, pb


class _Aborted(Exception):
    pass


class _Context:
    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.metadata = metadata
        self.code: grpc.StatusCode | None = None
        self.details = ""

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        raise _Aborted


class _Details:
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


def _handler(ready: list[bool], restrictions: Any = None) -> grpc.GenericRpcHandler:
    async def server_ready(data: bytes, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=ready[0])

    async def infer(data: bytes, context: Any) -> bytes:
        return b""

    async def stream(requests: AsyncIterator[bytes], context: Any) -> None:
        return None

    return service_handler({Method.SERVER_READY: server_ready}, infer, stream, restrictions or {})


def _check(handler: grpc.GenericRpcHandler, data: bytes, context: _Context) -> Any:
    method = handler.service(_Details("/grpc.health.v1.Health/Check"))
    assert method is not None
    answer = asyncio.run(method.unary_unary(data, context))
    return health_pb2.HealthCheckResponse.FromString(answer).status


def test_check_answers_the_servers_readiness_for_any_service() -> None:
    ready = [True]
    handler = _handler(ready)
    for service in ("", "inference.GRPCInferenceService", "anything"):
        request = health_pb2.HealthCheckRequest(service=service).SerializeToString()
        assert _check(handler, request, _Context()) == health_pb2.HealthCheckResponse.SERVING
    ready[0] = False
    assert _check(handler, b"", _Context()) == health_pb2.HealthCheckResponse.NOT_SERVING
    # The inference service's own methods are still there; Watch is not served.
    assert handler.service(_Details("/inference.GRPCInferenceService/ModelInfer")) is not None
    assert handler.service(_Details("/grpc.health.v1.Health/Watch")) is None


def test_garbage_is_invalid_argument() -> None:
    context = _Context()
    with pytest.raises(_Aborted):
        _check(_handler([True]), b"\xff\xff\xff", context)
    assert context.code is grpc.StatusCode.INVALID_ARGUMENT


def test_check_is_in_the_health_restricted_category() -> None:
    header = "triton-grpc-protocol-k"
    handler = _handler([True], {Category.HEALTH: Restriction(header, "v")})
    context = _Context()
    with pytest.raises(_Aborted):
        _check(handler, b"", context)
    assert context.code is grpc.StatusCode.UNAVAILABLE
    assert "This protocol is restricted" in context.details
    served = _check(handler, b"", _Context(((header, "v"),)))
    assert served == health_pb2.HealthCheckResponse.SERVING
