"""The route table of a `GRPCInferenceService` surface, for `thaw serve` and `thaw up` alike.

Each side brings its own handlers, already wrapped in its own error mapping (a ServingError or
an ActivatorError leaves as its gRPC status); this module puts them on the service's methods:
the unary methods parsed from raw bytes here (bytes that are not the method's message are then
INVALID_ARGUMENT, where grpc's own deserializer would make them UNKNOWN), `ModelInfer` and
`ModelStreamInfer` as raw bytes both ways, and the methods Thaw lacks answered UNIMPLEMENTED.
Every method first passes `--grpc-restricted-protocol`'s check (thawserver.restricted_protocols):
a call without its category's metadata ends UNAVAILABLE in Triton's words (a stream before it
reads a request), on both servers alike.

Beside it, the standard gRPC health service (`grpc.health.v1.Health/Check`, what Kubernetes'
`grpc` probes and `grpc_health_probe` call), as Triton 2.51 serves it: whatever service the
request names, SERVING when the server is ready (the surface's own `ServerReady`), NOT_SERVING
when not, in the `health` restricted category; `Watch` is not served (UNIMPLEMENTED), as in
Triton.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2

from thawserver.restricted_protocols import Category, Restriction, grpc_category
from thawwire.grpc_service import SERVICE, UNSUPPORTED, Method, pb, unsupported_text

__all__ = ["UNARY_REQUESTS", "parsed", "service_handler"]

_Resp = TypeVar("_Resp")
# grpc.aio.ServicerContext (grpcio ships no type information).
Context = Any
_Handler = Callable[[Any, Context], Awaitable[Any]]

# The request message of each unary method a surface answers from parsed messages.
UNARY_REQUESTS: dict[Method, Any] = {
    Method.SERVER_LIVE: pb.ServerLiveRequest,
    Method.SERVER_READY: pb.ServerReadyRequest,
    Method.MODEL_READY: pb.ModelReadyRequest,
    Method.SERVER_METADATA: pb.ServerMetadataRequest,
    Method.MODEL_METADATA: pb.ModelMetadataRequest,
    Method.MODEL_CONFIG: pb.ModelConfigRequest,
    Method.MODEL_STATISTICS: pb.ModelStatisticsRequest,
    Method.REPOSITORY_INDEX: pb.RepositoryIndexRequest,
    Method.REPOSITORY_MODEL_LOAD: pb.RepositoryModelLoadRequest,
    Method.REPOSITORY_MODEL_UNLOAD: pb.RepositoryModelUnloadRequest,
    Method.SYSTEM_SHARED_MEMORY_STATUS: pb.SystemSharedMemoryStatusRequest,
    Method.SYSTEM_SHARED_MEMORY_REGISTER: pb.SystemSharedMemoryRegisterRequest,
    Method.SYSTEM_SHARED_MEMORY_UNREGISTER: pb.SystemSharedMemoryUnregisterRequest,
    Method.CUDA_SHARED_MEMORY_STATUS: pb.CudaSharedMemoryStatusRequest,
    Method.CUDA_SHARED_MEMORY_REGISTER: pb.CudaSharedMemoryRegisterRequest,
    Method.CUDA_SHARED_MEMORY_UNREGISTER: pb.CudaSharedMemoryUnregisterRequest,
    Method.TRACE_SETTING: pb.TraceSettingRequest,
    Method.LOG_SETTINGS: pb.LogSettingsRequest,
}


def parsed(
    method: Method, handler: Callable[[Any, Context], Awaitable[_Resp]]
) -> Callable[[bytes, Context], Awaitable[_Resp]]:
    """`handler` of `method`'s parsed request message, from raw bytes (parsed in the handler,
    so that a parse error goes through the surface's own error mapping)."""
    message = UNARY_REQUESTS[method]

    @functools.wraps(handler)
    async def from_bytes(data: bytes, context: Context) -> _Resp:
        return await handler(message.FromString(data), context)

    return from_bytes


def service_handler(
    unary: Mapping[Method, Callable[[bytes, Context], Awaitable[Any]]],
    infer: Callable[[bytes, Context], Awaitable[bytes]],
    stream: Callable[[AsyncIterator[bytes], Context], Awaitable[None]],
    restrictions: Mapping[Category, Restriction],
) -> grpc.GenericRpcHandler:
    """Every method of the service: `unary` (raw bytes in, a message out), `infer` and
    `stream` (raw bytes both ways), each behind `restrictions`; the rest UNIMPLEMENTED naming
    the feature."""

    def guard(method: Method, handler: _Handler) -> _Handler:
        return _restricted(restrictions, method, handler)

    handlers: dict[str, grpc.RpcMethodHandler] = {
        method.value: grpc.unary_unary_rpc_method_handler(
            guard(method, fn), response_serializer=_serialize
        )
        for method, fn in unary.items()
    }
    handlers[Method.MODEL_INFER.value] = grpc.unary_unary_rpc_method_handler(
        guard(Method.MODEL_INFER, infer)
    )
    handlers[Method.MODEL_STREAM_INFER.value] = grpc.stream_stream_rpc_method_handler(
        guard(Method.MODEL_STREAM_INFER, stream)
    )
    for method in UNSUPPORTED:
        handlers[method.value] = grpc.unary_unary_rpc_method_handler(
            functools.partial(_unimplemented, method)
        )
    check = _health_check(unary[Method.SERVER_READY])
    health = {"Check": grpc.unary_unary_rpc_method_handler(guard(Method.SERVER_READY, check))}
    return _Services(
        grpc.method_handlers_generic_handler(SERVICE, handlers),
        grpc.method_handlers_generic_handler(_HEALTH_SERVICE, health),
    )


_HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


class _Services(grpc.GenericRpcHandler):
    """Several services' method handlers as one generic handler."""

    def __init__(self, *services: grpc.GenericRpcHandler) -> None:
        self._services = services

    def service(self, handler_call_details: Any) -> grpc.RpcMethodHandler | None:
        for service in self._services:
            found = service.service(handler_call_details)
            if found is not None:
                return found
        return None


def _health_check(
    server_ready: Callable[[bytes, Context], Awaitable[Any]],
) -> Callable[[bytes, Context], Awaitable[bytes]]:
    """`grpc.health.v1.Health/Check` from the surface's `ServerReady` handler."""

    async def check(data: bytes, context: Context) -> bytes:
        try:
            health_pb2.HealthCheckRequest.FromString(data)  # its `service` is not looked at
        except DecodeError as exc:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"the request could not be parsed: {exc}"
            )
        ready = (await server_ready(b"", context)).ready
        status = health_pb2.HealthCheckResponse.SERVING if ready else _NOT_SERVING
        return bytes(health_pb2.HealthCheckResponse(status=status).SerializeToString())

    return check


_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _restricted(
    restrictions: Mapping[Category, Restriction], method: Method, handler: _Handler
) -> _Handler:
    """`handler`, or, when its method's category is restricted, one that first ends a call
    without the metadata UNAVAILABLE (a stream before any read)."""
    category = grpc_category(method)
    restriction = restrictions.get(category) if category is not None else None
    if restriction is None:
        return handler

    async def restricted(request: Any, context: Context) -> Any:
        if not restriction.allows(context.invocation_metadata() or ()):
            await context.abort(grpc.StatusCode.UNAVAILABLE, restriction.refusal)
        return await handler(request, context)

    return restricted


def _serialize(message: Any) -> bytes:
    return bytes(message.SerializeToString())


async def _unimplemented(method: Method, request: bytes, context: Context) -> bytes:
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, unsupported_text(method))
    raise AssertionError("context.abort returned")
