"""The shared-memory extension's own calls, REST and gRPC: register, status, unregister.

Thin handlers over a server's registry (thawserver.shm_registry), the same for `thaw serve`
(its clients' regions) and `thaw up` (which owns the regions of the clients it fronts, since
replicas come and go). System shared memory is
Triton's; CUDA shared memory is answered as a Triton built without GPU support answers it
(2.51's frontends without TRITON_ENABLE_GPU): its status is empty, unregistering finds
nothing to do, and registering is refused with "failed to register CUDA shared memory region:
'<name>', GPUs not supported" (INVALID_ARG) once its body or handle passes the checks a GPU
build makes (a client's bad request is named as Triton's usual images name it). A refusal is a
400 over REST (404 for the status of an unknown region, Triton's NOT_FOUND) and Triton's code
over gRPC (NOT_FOUND, ALREADY_EXISTS, INVALID_ARGUMENT, INTERNAL); a register body that does
not arrive in time is 408, as every body on both servers (thawserver.body_deadline). The REST
handlers answer their own errors as `{"error": ...}` (the one shape both servers' middlewares
write), so that neither server keeps a copy of them.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import grpc
from aiohttp import web

from thawserver.body_deadline import BODY_TIMEOUT_STATUS, body_timeout_message
from thawserver.json_response import json_response
from thawserver.shm_registry import SystemSharedMemory
from thawwire.errors import ErrorKind, SharedMemoryError
from thawwire.grpc_service import Method, pb

__all__ = ["CUDA", "SYSTEM", "RestSharedMemory", "grpc_code", "grpc_shm_methods"]

SYSTEM = "/v2/systemsharedmemory"
CUDA = "/v2/cudasharedmemory"
_MAX_REGISTER_BODY = 64 * 1024
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_GRPC_CODES = {
    ErrorKind.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorKind.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorKind.INTERNAL: grpc.StatusCode.INTERNAL,
}


class _Refused(Exception):
    """A REST call answered with `{"error": message}` and `status`."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def grpc_code(exc: SharedMemoryError) -> grpc.StatusCode:
    """The gRPC code Triton's frontend gives a refusal of this kind."""
    return _GRPC_CODES[exc.kind]


# sizeof(cudaIpcMemHandle_t): what a CUDA IPC handle of any GPU is.
CUDA_IPC_HANDLE_BYTES = 64


def cuda_unsupported(name: str, raw_handle: bytes | None = None) -> SharedMemoryError:
    """Triton's answer to a CUDA registration when it has no GPU support; a handle that no
    GPU could open (not a CUDA IPC handle's size) gets the answer of a Triton with GPUs to it,
    "invalid args" (what Triton's L0_grpc pins for an empty handle)."""
    if raw_handle is not None and len(raw_handle) != CUDA_IPC_HANDLE_BYTES:
        return SharedMemoryError(
            "failed to register shared memory region: invalid args", ErrorKind.INVALID_ARG
        )
    return SharedMemoryError(
        f"failed to register CUDA shared memory region: '{name}', GPUs not supported",
        ErrorKind.INVALID_ARG,
    )


def _uint(doc: dict[str, Any], key: str, *, required: bool) -> int:
    if key not in doc:
        if required:
            raise _Refused(f"Shared memory register request has no '{key}' field")
        return 0
    value = doc[key]
    if type(value) is not int or not 0 <= value < (1 << 64):
        raise _Refused(
            f"Unable to parse '{key}': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer"
        )
    return value


class RestSharedMemory:
    """`/v2/systemsharedmemory[/region/{name}]/{status|register|unregister}` and CUDA's."""

    def __init__(self, registry: SystemSharedMemory, *, body_timeout_s: float) -> None:
        self._registry = registry
        self._body_timeout_s = body_timeout_s  # a register body must arrive within it

    def add_routes(
        self,
        router: web.UrlDispatcher,
        wrap: Callable[[_Handler], _Handler] = lambda handler: handler,
    ) -> None:
        """The extension's routes (any method: a wrong one is Triton's 405 text), each handler
        passed through `wrap` (e.g. a restricted category's header check)."""
        for base, handler in ((SYSTEM, self.system), (CUDA, self.cuda)):
            route = wrap(handler)
            router.add_route("*", base + "/{action:status|register|unregister}", route)
            router.add_route(
                "*", base + "/region/{region:[^/]+}/{action:status|register|unregister}", route
            )

    async def system(self, request: web.Request) -> web.Response:
        try:
            return await self._system(request)
        except _Refused as exc:
            return json_response({"error": exc.message}, exc.status)

    async def cuda(self, request: web.Request) -> web.Response:
        try:
            return await self._cuda(request)
        except _Refused as exc:
            return json_response({"error": exc.message}, exc.status)

    async def _system(self, request: web.Request) -> web.Response:
        action, region = _action(request)
        try:
            if action == "status":
                return json_response(self._registry.status(region))
            if action == "register":
                if region is None:
                    raise _Refused(
                        "'region name' is necessary to register system shared memory region"
                    )
                doc = await self._register_body(request)
                key = doc.get("key")
                if "key" not in doc:
                    raise _Refused("Shared memory register request has no 'key' field")
                if not isinstance(key, str):
                    raise _Refused("Unable to parse 'key': attempt to access JSON non-string")
                offset = _uint(doc, "offset", required=False)
                byte_size = _uint(doc, "byte_size", required=True)
                self._registry.register(region, key, offset, byte_size)
            elif region is None:
                self._registry.unregister_all()
            else:
                self._registry.unregister(region)
        except SharedMemoryError as exc:
            # Triton's REST status of its code: 404 for NOT_FOUND (an unknown region's status,
            # observed on 2.51), 400 for the rest (bad input; Triton says 500 for INTERNAL).
            status = 404 if exc.kind is ErrorKind.NOT_FOUND else 400
            raise _Refused(exc.message, status) from None
        return web.Response(status=200, content_type="application/json")

    async def _register_body(self, request: web.Request) -> dict[str, Any]:
        """A register call's JSON body, read within the body deadline."""
        try:
            async with asyncio.timeout(self._body_timeout_s):
                return await _register_body(request)
        except TimeoutError:
            raise _Refused(
                body_timeout_message(self._body_timeout_s), BODY_TIMEOUT_STATUS
            ) from None

    async def _cuda(self, request: web.Request) -> web.Response:
        action, region = _action(request)
        if action == "status":
            if region is not None:
                # 404, Triton's NOT_FOUND, as for a system region (observed on 2.51)
                raise _Refused(f"Unable to find cuda shared memory region: '{region}'", 404)
            return json_response([])
        if action == "register":
            if region is None:
                raise _Refused("'region name' is necessary to register cuda shared memory region")
            doc = await self._register_body(request)
            raise _Refused(cuda_unsupported(region, _cuda_handle(doc)).message)
        return web.Response(status=200, content_type="application/json")


def _cuda_handle(doc: dict[str, Any]) -> bytes:
    """The raw handle of a CUDA register body, its members checked in Triton's order and words
    (2.51's frontend with GPU support: `raw_handle`, its `b64`, `byte_size`, `device_id`, then
    the handle's size); a handle that is not valid base64 is returned empty (no handle's size)."""
    if "raw_handle" not in doc:
        raise _Refused("Shared memory register request has no 'raw_handle' field")
    raw_handle = doc["raw_handle"]
    if not isinstance(raw_handle, dict) or "b64" not in raw_handle:
        raise _Refused("attempt to access non-existing object member 'b64'")
    if not isinstance(raw_handle["b64"], str):
        raise _Refused("attempt to access JSON non-string as string")
    for key in ("byte_size", "device_id"):
        if key not in doc:
            raise _Refused(f"attempt to access non-existing object member '{key}'")
        value = doc[key]
        if type(value) is not int or not 0 <= value < (1 << 64):
            raise _Refused("attempt to access JSON non-unsigned-integer as unsigned-integer")
    try:
        handle = base64.b64decode(raw_handle["b64"], validate=True)
    except ValueError:
        handle = b""
    if len(handle) != CUDA_IPC_HANDLE_BYTES:
        raise _Refused("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    return handle


def _action(request: web.Request) -> tuple[str, str | None]:
    action = request.match_info["action"]
    wanted = "GET" if action == "status" else "POST"
    allowed = (wanted, "HEAD") if wanted == "GET" else (wanted,)
    if request.method not in allowed:
        raise _Refused("Method Not Allowed", 405)
    return action, request.match_info.get("region")


async def _register_body(request: web.Request) -> dict[str, Any]:
    if request.content_length is not None and request.content_length > _MAX_REGISTER_BODY:
        raise _Refused(f"register request body is over {_MAX_REGISTER_BODY} bytes", 413)
    body = b""
    while len(body) <= _MAX_REGISTER_BODY:
        chunk = await request.content.readany()
        if not chunk:
            break
        body += chunk
    if len(body) > _MAX_REGISTER_BODY:
        raise _Refused(f"register request body is over {_MAX_REGISTER_BODY} bytes", 413)
    try:
        doc = json.loads(body) if body.strip() else None
    except (ValueError, RecursionError) as exc:
        raise _Refused(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(doc, dict):
        raise _Refused("Shared memory register request must be a JSON object")
    return doc


def grpc_shm_methods(
    registry: SystemSharedMemory,
) -> dict[Method, Callable[[Any, Any], Coroutine[Any, Any, Any]]]:
    """The six gRPC methods: each takes its parsed request message and a servicer context and
    returns its response message; a refusal ends the call with Triton's code."""

    def system_status(request: Any) -> Any:
        response = pb.SystemSharedMemoryStatusResponse()
        for row in registry.status(request.name or None):
            response.regions[row["name"]].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(**row)
            )
        return response

    def system_register(request: Any) -> Any:
        registry.register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    def system_unregister(request: Any) -> Any:
        if request.name:
            registry.unregister(request.name)
        else:
            registry.unregister_all()
        return pb.SystemSharedMemoryUnregisterResponse()

    def cuda_status(request: Any) -> Any:
        if request.name:
            raise SharedMemoryError(
                f"Unable to find cuda shared memory region: '{request.name}'",
                ErrorKind.NOT_FOUND,
            )
        return pb.CudaSharedMemoryStatusResponse()

    def cuda_register(request: Any) -> Any:
        raise cuda_unsupported(request.name, request.raw_handle)

    def cuda_unregister(request: Any) -> Any:
        return pb.CudaSharedMemoryUnregisterResponse()

    plain = {
        Method.SYSTEM_SHARED_MEMORY_STATUS: system_status,
        Method.SYSTEM_SHARED_MEMORY_REGISTER: system_register,
        Method.SYSTEM_SHARED_MEMORY_UNREGISTER: system_unregister,
        Method.CUDA_SHARED_MEMORY_STATUS: cuda_status,
        Method.CUDA_SHARED_MEMORY_REGISTER: cuda_register,
        Method.CUDA_SHARED_MEMORY_UNREGISTER: cuda_unregister,
    }
    return {method: _refusing(fn) for method, fn in plain.items()}


def _refusing(fn: Callable[[Any], Any]) -> Callable[[Any, Any], Coroutine[Any, Any, Any]]:
    async def call(request: Any, context: Any) -> Any:
        try:
            return fn(request)
        except SharedMemoryError as exc:
            await context.abort(grpc_code(exc), exc.message)
            raise AssertionError("context.abort returned") from None

    call.__name__ = fn.__name__
    return call
