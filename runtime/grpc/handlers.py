"""Thin `GRPCInferenceService` handlers: decode the message, call the ModelManager, encode it.

The gRPC twin of runtime.http.handlers, over the same ModelService: every answer is built from the
documents the REST surface sends (thawwire.grpc_messages), every error is the same
ServingError, leaving with the gRPC code of its HTTP status (thawserver.grpc_status). `routes()`
is THE route table of this surface. ModelInfer takes and returns raw bytes (identity
(de)serializers) so that a large message is parsed and built in a worker thread, not on the
event loop; ModelStreamInfer is runtime.grpc.stream's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError

from runtime.codecs.protobuf import (
    THREAD_THRESHOLD_BYTES,
    decode_model_infer,
    encode_model_infer,
    message_ref,
)
from runtime.codecs.shm_tensors import ShmBinding
from runtime.config import ModelControlMode, ServeConfig
from runtime.errors import (
    ControlDisabled,
    FeatureDisabled,
    InvalidInput,
    ModelNotFound,
    ModelNotLoaded,
    ServingError,
)
from runtime.grpc.stream import in_model_words, serve_stream
from runtime.header_forward import forwarded_headers
from runtime.inference import InferRequest, InferResponse
from runtime.models.lifecycle import ServerState
from runtime.models.load_overrides import (
    check_load_parameters,
    overrides_from_grpc,
    unload_dependents_from_grpc,
)
from runtime.models.manager import DECOUPLED_GRPC_INFER, DECOUPLED_INFER
from runtime.models.service import StreamingModelService, server_live, server_ready
from runtime.observe.tracing import RequestTracer, frontend_trace
from thawserver.grpc_routes import parsed, service_handler
from thawserver.grpc_status import error_status
from thawserver.redaction import Redactor
from thawserver.settings_api import SettingsApi
from thawserver.shm_api import grpc_shm_methods
from thawserver.shm_registry import SystemSharedMemory
from thawwire.grpc_messages import (
    config_response,
    index_response,
    metadata_response,
    server_metadata_response,
    statistics_response,
)
from thawwire.grpc_service import Method, pb
from thawwire.model_control import CONTROL_DISABLED, NOT_LOADED
from thawwire.server_info import server_metadata

__all__ = ["GrpcHandlers", "StreamingModelService", "abort_with"]

logger = logging.getLogger(__name__)

_NO_REPOSITORY_NAME = "'repository_name' specification is not supported"

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
# grpc.aio.ServicerContext (grpcio ships no type information).
Context = Any


async def abort_with(context: Context, exc: ServingError, redact: Redactor | None = None) -> None:
    """End the call with the gRPC code of `exc`'s HTTP status and its message, without the
    server's directories or a traceback when `redact` is given (never returns)."""
    code = error_status(exc.status, exc.grpc_code)
    # A client's error is a verbose record (as the HTTP front's), a server's a warning.
    level = logging.WARNING if exc.status >= 500 else logging.DEBUG
    logger.log(level, "gRPC %s: %s", code.name, exc.message)
    message = redact(exc.message) if redact is not None else exc.message
    trailing = ((NOT_LOADED, exc.model),) if isinstance(exc, ModelNotLoaded) else ()
    await context.abort(code, message, trailing)


def _answering(
    handler: Callable[[_Req, Context], Awaitable[_Resp]], redact: Redactor
) -> Callable[[_Req, Context], Awaitable[_Resp]]:
    """A unary handler whose ServingError leaves as its gRPC status, and whose bug leaves as
    INTERNAL (logged) instead of grpc's bare "Unexpected error"."""

    @functools.wraps(handler)
    async def answering(request: _Req, context: Context) -> _Resp:
        try:
            return await handler(request, context)
        except ServingError as exc:
            await abort_with(context, exc, redact)
        except DecodeError as exc:
            bad = InvalidInput(f"the request could not be parsed: {exc}")
            await abort_with(context, bad, redact)
        except asyncio.CancelledError:
            # The client cancelled the call, or its deadline passed: a request still queued
            # will not run (runtime.scheduling.batch_execution). Triton's verbose line.
            logger.debug("Cancellation notification received for %s", handler.__name__)
            raise
        except grpc.aio.AbortError:
            raise
        except Exception:
            logger.exception("unexpected error in gRPC %s", handler.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, "internal server error")
        raise AssertionError("context.abort returned")  # abort always raises

    return answering


class GrpcHandlers:
    """The service's methods, bound to one server's config, model service and state."""

    def __init__(
        self,
        config: ServeConfig,
        manager: StreamingModelService,
        state: ServerState,
        *,
        shared_memory: SystemSharedMemory | None = None,
        settings: SettingsApi | None = None,
        tracer: RequestTracer | None = None,
        sync_front_stats: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._config = config
        # The native front's own answers, added to the statistics before they are read
        # (runtime.process.native_front; a no-op without it).
        self._sync_front_stats = sync_front_stats
        # Where a ModelInfer's trace begins (its GRPC_* activities: runtime.observe.tracing).
        self._tracer = tracer
        # The logging and trace extensions, shared with the REST surface (runtime.http.app).
        self._settings = settings
        # The regions of this server's clients: the REST surface's registry (runtime.http.app).
        self._shm = shared_memory if shared_memory is not None else SystemSharedMemory()
        self._manager = manager
        self._state = state
        self._server_metadata = server_metadata_response(server_metadata(config.server_id))
        # What error messages must not show (thawserver.redaction), as on the REST surface.
        self._redact = config.redactor
        self._forward = config.grpc_header_forward
        self._restrictions = config.grpc_restrictions

    def routes(self) -> grpc.GenericRpcHandler:
        """THE route table of the gRPC surface: every method of the service."""
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
        unary.update(grpc_shm_methods(self._shm))
        if self._settings is not None:
            unary.update(self._settings.grpc_methods())
        # Raw bytes both ways for inference: parsed and built here, in a thread when large.
        return service_handler(
            {method: _answering(parsed(method, fn), self._redact) for method, fn in unary.items()},
            _answering(self.model_infer, self._redact),
            self.model_stream_infer,
            self._restrictions,
        )

    # -- health and metadata -------------------------------------------------------------

    async def server_live(self, request: Any, context: Context) -> Any:
        return pb.ServerLiveResponse(live=server_live(self._state))

    async def server_ready(self, request: Any, context: Context) -> Any:
        return pb.ServerReadyResponse(ready=server_ready(self._config, self._manager, self._state))

    async def model_ready(self, request: Any, context: Context) -> Any:
        # Triton 2.51 answers ready=false, never NOT_FOUND, for a model or version it does not
        # know, a name that is no name included (tritonclient's is_model_ready returns False).
        try:
            name, version = message_ref(request.name, request.version)
            return pb.ModelReadyResponse(ready=self._manager.model_ready(name, version))
        except ModelNotFound:
            return pb.ModelReadyResponse(ready=False)

    async def server_metadata(self, request: Any, context: Context) -> Any:
        return self._server_metadata

    async def model_metadata(self, request: Any, context: Context) -> Any:
        name, version = message_ref(request.name, request.version)
        return metadata_response(self._manager.metadata(name, version))

    async def model_config(self, request: Any, context: Context) -> Any:
        name, version = message_ref(request.name, request.version)
        return config_response(self._manager.config(name, version))

    async def model_statistics(self, request: Any, context: Context) -> Any:
        if self._sync_front_stats is not None:
            await self._sync_front_stats()
        if not request.name:
            doc = self._manager.statistics(None, None)
        else:
            name, version = message_ref(request.name, request.version)
            doc = self._manager.statistics(name, version)
        return statistics_response(doc["model_stats"])

    # -- inference -----------------------------------------------------------------------

    async def model_infer(self, data: bytes, context: Context) -> bytes:
        # Regions the request names are leased until its response is encoded (in use).
        shm = ShmBinding(self._shm)
        try:
            return await self._model_infer(data, context, shm)
        finally:
            shm.release()

    async def _model_infer(self, data: bytes, context: Context, shm: ShmBinding) -> bytes:
        received_ns = time.perf_counter_ns()
        if len(data) > THREAD_THRESHOLD_BYTES:
            name, version, decoded = await asyncio.to_thread(_decode, data, shm)
        else:
            name, version, decoded = _decode(data, shm)
        if isinstance(decoded, InvalidInput):
            # A bad request for a model that does not exist is a NOT_FOUND first (as on REST).
            self._manager.model_ready(*message_ref(name, version))
            raise in_model_words(self._manager, decoded, name)
        request = decoded
        if self._forward is not None:  # `--grpc-header-forward-pattern`
            metadata = context.invocation_metadata() or ()
            request.parameters.update(forwarded_headers(self._forward, metadata))
        # Sampled as Triton's gRPC frontend samples; its message was read when the call came.
        arrived = ("GRPC_WAITREAD_START", received_ns)
        trace = frontend_trace(self._tracer, request, arrived, "GRPC_WAITREAD_END")
        if trace is None:
            return await self._answer(request, shm)
        try:
            answer = await self._answer(request, shm)
            # The answer goes to grpc now, which writes it: its send is grpc's own.
            sent_ns = time.perf_counter_ns()
            trace.add("GRPC_SEND_START", sent_ns)
            trace.add("GRPC_SEND_END", sent_ns)
            return answer
        finally:
            trace.end()

    async def _answer(self, request: InferRequest, shm: ShmBinding) -> bytes:
        try:
            response = await self._manager.infer(request)
        except FeatureDisabled as exc:
            if exc.message != DECOUPLED_INFER:
                raise
            raise FeatureDisabled(DECOUPLED_GRPC_INFER) from None
        if request.trace is not None:
            request.trace.add("INFER_RESPONSE_COMPLETE", time.perf_counter_ns())
        if sum(t.data.nbytes for t in response.outputs) > THREAD_THRESHOLD_BYTES:
            return await asyncio.to_thread(_encode, response, request, shm)
        return _encode(response, request, shm)

    async def model_stream_infer(self, requests: AsyncIterator[bytes], context: Context) -> None:
        await serve_stream(
            self._manager, requests, context, self._redact,
            forward=self._forward, shared_memory=self._shm,
            stopping=lambda: self._state.stopping, tracer=self._tracer,
        )  # fmt: skip

    # -- model repository extension ------------------------------------------------------

    async def repository_index(self, request: Any, context: Context) -> Any:
        if request.repository_name:
            raise FeatureDisabled(_NO_REPOSITORY_NAME)
        rows = await self._manager.index(ready_only=request.ready)
        return index_response(self._redact.index(rows))

    async def load(self, request: Any, context: Context) -> Any:
        # Triton's frontend checks the parameters' kinds first, its core the control mode.
        check_load_parameters(request.parameters)
        self._control_allowed(request.repository_name)
        name = request.model_name  # not a name: the manager refuses it as Triton's load does
        config, files = overrides_from_grpc(name, request.parameters)
        await self._manager.load(name, config_json=config, files=files)
        return pb.RepositoryModelLoadResponse()

    async def unload(self, request: Any, context: Context) -> Any:
        unload_dependents = unload_dependents_from_grpc(request.parameters)  # first, as Triton
        self._control_allowed(request.repository_name)
        await self._manager.unload(request.model_name, unload_dependents=unload_dependents)
        return pb.RepositoryModelUnloadResponse()

    def _control_allowed(self, repository_name: str) -> None:
        """As on REST: load/unload only in explicit model control mode (Triton's UNAVAILABLE)."""
        if repository_name:
            raise FeatureDisabled(_NO_REPOSITORY_NAME)
        if self._config.model_control_mode is not ModelControlMode.EXPLICIT:
            raise ControlDisabled(CONTROL_DISABLED)


def _decode(data: bytes, shm: ShmBinding) -> tuple[str, str, InferRequest | InvalidInput]:
    """Parse and decode a ModelInferRequest: (model, version, request or why it is bad)."""
    message = pb.ModelInferRequest.FromString(data)
    try:
        return message.model_name, message.model_version, decode_model_infer(message, shm=shm)
    except InvalidInput as exc:
        return message.model_name, message.model_version, exc


def _encode(response: InferResponse, request: InferRequest, shm: ShmBinding) -> bytes:
    return bytes(encode_model_infer(response, request, shm=shm).SerializeToString())
