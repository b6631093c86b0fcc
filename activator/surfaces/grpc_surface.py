"""The activator's gRPC surface: THE route table of `GRPCInferenceService` in `thaw up`.

As on its REST surface, health, metadata, config, readiness, the index and statistics are
answered here from the repository and the endpoints (activator.surfaces.answers), without waking a
model (but the first config or metadata of a python model whose own `auto_complete_config`
completes its config: activator.fleet.replica_config); only inference reaches replicas
(activator.surfaces.grpc_forward), as opaque bytes. The repository load call warms a model, unload
scales it to zero, as REST's do. Every
`ActivatorError` leaves with the gRPC code of its HTTP status (thawserver.grpc_status).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError

from activator.errors import ActivatorError, BadRequest, ControlDisabled, NotSupported
from activator.fleet.fleet import Fleet
from activator.surfaces import answers
from activator.surfaces.answers import (
    check_ready,
    index_rows,
    server_live,
    server_ready,
    stats_rows,
)
from activator.surfaces.grpc_calls import message_version
from activator.surfaces.grpc_forward import GrpcForwarder
from thawserver.connection_limits import (
    ConnectionLimits,
    grpc_max_concurrent_rpcs,
    grpc_server_options,
)
from thawserver.grpc_bind import bind_grpc_port
from thawserver.grpc_compression import grpc_compression_options
from thawserver.grpc_keepalive import GrpcKeepalive, grpc_keepalive_options
from thawserver.grpc_routes import parsed, service_handler
from thawserver.grpc_status import grpc_status
from thawserver.grpc_tls import GrpcTls, server_credentials
from thawserver.settings_api import SettingsApi
from thawserver.shm_api import grpc_shm_methods
from thawserver.shm_registry import SystemSharedMemory
from thawwire import server_info
from thawwire.errors import LoadOverrideError, LoadParameterError
from thawwire.grpc_messages import (
    config_response,
    index_response,
    metadata_response,
    server_metadata_response,
    statistics_response,
)
from thawwire.grpc_service import Method, pb
from thawwire.load_overrides import (
    check_load_parameters,
    overrides_from_grpc,
    refused,
    unload_dependents_from_grpc,
)
from thawwire.model_control import CONTROL_DISABLED

__all__ = ["GrpcSurface", "bind_grpc_server", "start_grpc_server"]

logger = logging.getLogger(__name__)

# grpc.aio.ServicerContext (grpcio ships no type information).
Context = Any
_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_NO_REPOSITORY_NAME = "'repository_name' specification is not supported"


def _answering(
    handler: Callable[[_Req, Context], Awaitable[_Resp]],
    redact: Callable[[str], str],
) -> Callable[[_Req, Context], Awaitable[_Resp]]:
    """A handler whose ActivatorError leaves as its gRPC status, its message without the
    server's directories (`redact`, as on HTTP); a bug as INTERNAL (logged)."""

    @functools.wraps(handler)
    async def answering(request: _Req, context: Context) -> _Resp:
        try:
            return await handler(request, context)
        except ActivatorError as exc:
            await context.abort(grpc_status(exc.status), redact(exc.message))
        except DecodeError as exc:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"the request could not be parsed: {exc}"
            )
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception:
            logger.exception("unhandled error in gRPC %s", handler.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error in the activator")
        raise AssertionError("context.abort returned")  # abort always raises

    return answering


class GrpcSurface:
    """The service's methods over one `thaw up`'s fleet."""

    def __init__(
        self,
        fleet: Fleet,
        shared_memory: SystemSharedMemory | None = None,
        *,
        settings: SettingsApi | None = None,
    ) -> None:
        self._fleet = fleet
        # The logging and trace extensions, shared with the REST surface (activator.surfaces.app).
        self._settings = settings
        # The clients' regions, shared with the REST surface (activator.surfaces.app.SHARED_MEMORY).
        self._shm = shared_memory if shared_memory is not None else SystemSharedMemory()
        self.forwarder = GrpcForwarder(fleet, self._shm)
        self._server_metadata = server_metadata_response(
            server_info.server_metadata(fleet.config.server_id)
        )
        self._restrictions = fleet.config.grpc_restrictions

    def routes(self) -> grpc.GenericRpcHandler:
        """THE route table of `thaw up`'s gRPC surface."""
        unary = {
            Method.SERVER_LIVE: self.server_live,
            Method.SERVER_READY: self.server_ready,
            Method.MODEL_READY: self.model_ready,
            Method.SERVER_METADATA: self.server_metadata,
            Method.MODEL_METADATA: self.model_metadata,
            Method.MODEL_CONFIG: self.model_config,
            Method.MODEL_STATISTICS: self.model_statistics,
            Method.REPOSITORY_INDEX: self.repository_index,
            Method.REPOSITORY_MODEL_LOAD: self.load,
            Method.REPOSITORY_MODEL_UNLOAD: self.unload,
        }
        unary.update(grpc_shm_methods(self._shm))  # registered here: the activator owns them
        redact = self._fleet.config.redactor
        if self._settings is not None:
            unary.update(self._settings.grpc_methods())  # the activator keeps the settings
        # Inference travels as bytes: the activator parses no tensor (but shared memory's).
        return service_handler(
            {method: _answering(parsed(method, fn), redact) for method, fn in unary.items()},
            _answering(self.forwarder.infer, redact),
            self.model_stream_infer,
            self._restrictions,
        )

    # ---- answered here ----------------------------------------------------------------------

    async def server_live(self, request: Any, context: Context) -> Any:
        return pb.ServerLiveResponse(live=server_live(self._fleet))

    async def server_ready(self, request: Any, context: Context) -> Any:
        return pb.ServerReadyResponse(ready=server_ready(self._fleet))

    async def model_ready(self, request: Any, context: Context) -> Any:
        """Ready = servable (at zero too); a failed wake-up reads ready=false, as a replica's
        model that is not ready does; so does an unknown model or version (Triton 2.51 answers
        it ready=false, never NOT_FOUND: tritonclient's is_model_ready returns False)."""
        try:
            await check_ready(self._fleet, request.name, message_version(request.version))
        except ActivatorError as exc:
            if exc.status not in (404, 503):
                raise
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=True)

    async def server_metadata(self, request: Any, context: Context) -> Any:
        return self._server_metadata

    async def model_metadata(self, request: Any, context: Context) -> Any:
        version = message_version(request.version)
        return metadata_response(await answers.model_metadata(self._fleet, request.name, version))

    async def model_config(self, request: Any, context: Context) -> Any:
        version = message_version(request.version)
        return config_response(await answers.model_config(self._fleet, request.name, version))

    async def model_statistics(self, request: Any, context: Context) -> Any:
        name = request.name or None
        version = message_version(request.version) if name else None
        rows = await stats_rows(self._fleet, name, version)
        return statistics_response(rows)

    async def repository_index(self, request: Any, context: Context) -> Any:
        if request.repository_name:
            raise NotSupported(_NO_REPOSITORY_NAME)
        return index_response(await index_rows(self._fleet, ready_only=request.ready))

    def _require_model_control(self) -> None:
        if not self._fleet.config.model_control:
            raise ControlDisabled(CONTROL_DISABLED)

    async def load(self, request: Any, context: Context) -> Any:
        """Re-read the model's directory (activator.fleet.reload), then warm it: returns once
        one replica is ready (or the wake-up failed)."""
        try:  # the parameters' kinds first, as Triton's frontend checks them
            check_load_parameters(request.parameters)
        except LoadParameterError as exc:
            raise BadRequest(exc.message) from None
        self._require_model_control()
        if request.repository_name:
            raise NotSupported(_NO_REPOSITORY_NAME)
        try:
            override = overrides_from_grpc(request.parameters)
        except LoadOverrideError as exc:
            raise BadRequest(refused(request.model_name, exc.message)) from None
        await self._fleet.load(request.model_name, override)
        return pb.RepositoryModelLoadResponse()

    async def unload(self, request: Any, context: Context) -> Any:
        """Scale the model to zero now (draining in-flight requests)."""
        try:  # checked first, as Triton's frontend checks it
            dependents = unload_dependents_from_grpc(request.parameters)
        except LoadParameterError as exc:
            raise BadRequest(exc.message) from None
        self._require_model_control()
        if request.repository_name:
            raise NotSupported(_NO_REPOSITORY_NAME)
        await self._fleet.unload(request.model_name, unload_dependents=dependents)
        return pb.RepositoryModelUnloadResponse()

    # ---- forwarded --------------------------------------------------------------------------

    async def model_stream_infer(self, requests: AsyncIterator[bytes], context: Context) -> None:
        await self.forwarder.stream(requests, context)


def bind_grpc_server(
    host: str,
    port: int,
    *,
    max_message_bytes: int,
    limits: ConnectionLimits | None = None,
    compression_level: str = "none",
    keepalive: GrpcKeepalive | None = None,
    tls: GrpcTls | None = None,
    reuse_port: bool = False,
) -> tuple[grpc.aio.Server, str]:
    """A gRPC server bound to `host:port` (0: a free port, bound here, so nothing can take it
    before it starts) and that bound `host:port`; not started (`start_grpc_server`). OSError
    when the address cannot be bound. Messages over `max_message_bytes` are
    RESOURCE_EXHAUSTED; SO_REUSEPORT only with `reuse_port` (tritonserver's `--reuse-grpc-port`:
    other servers may listen on the port too; without it a port in use is an error); the
    connection `limits` as grpc options (handshake deadline, idle GOAWAY, connection and call
    caps); responses compressed at tritonserver's `compression_level`
    (thawserver.grpc_compression); tritonserver's `keepalive` and HTTP/2 ping settings
    (thawserver.grpc_keepalive); over TLS with `tls` (thawserver.grpc_tls)."""
    limits = limits if limits is not None else ConnectionLimits()
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", min(max_message_bytes, (1 << 31) - 1)),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", int(reuse_port)),
            ("grpc.max_concurrent_streams", 1024),  # calls at once on one client connection
            *grpc_server_options(limits),
            *grpc_compression_options(compression_level),
            *grpc_keepalive_options(keepalive or GrpcKeepalive()),
        ],
        maximum_concurrent_rpcs=grpc_max_concurrent_rpcs(limits),
    )
    credentials = server_credentials(tls) if tls is not None else None
    return server, bind_grpc_port(server, host, port, credentials, reuse_port=reuse_port)


async def start_grpc_server(server: grpc.aio.Server, surface: GrpcSurface) -> None:
    """Serve `surface` on a server `bind_grpc_server` made."""
    server.add_generic_rpc_handlers((surface.routes(),))
    await server.start()
