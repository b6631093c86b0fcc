"""One `ModelStreamInfer` call: requests in, each request's responses out, errors in-stream.

Requests on a stream are served concurrently (up to `MAX_IN_FLIGHT` at once; beyond it the
stream is not read, so gRPC's flow control holds the client back). Responses are written one
at a time; a non-decoupled model's responses leave in request order, as Triton writes them,
while a decoupled model's leave as they come. Every response carries Triton's
`triton_final_response`; a request that ends with no final response gets an empty final one
when it asked for it (`triton_enable_empty_final_response`).

Once the server begins to shut down, a new request on an open stream is answered in-stream with
`STREAM_STOPPING` (thawwire.grpc_messages) and not run; what is in flight is answered as usual
(tritonserver ends its streams when it shuts down; a client sees an error either way).

A failed request is answered in-stream (`error_message`) and the stream goes on, unless the
client sent the `triton_grpc_error: true` header: then the first error of a request that ran
(its model's error, a failed execute, a deadline) ends the stream with its gRPC status, as
Triton does; a request refused before it ran (unknown model, bad input or parameters, a full
queue) is still answered in-stream, as Triton 2.51 answers it. A client that goes away cancels
its requests; the server goes on serving everyone else.

Tensors may name system shared-memory regions, as in `ModelInfer`: each request leases the
regions it names (runtime.codecs.shm_tensors) until its last response is written; a decoupled
model's every response writes its outputs into the same regions, as Triton's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError

from runtime.codecs.protobuf import (
    THREAD_THRESHOLD_BYTES,
    UnknownDatatype,
    decode_model_infer,
    encode_model_infer,
    message_ref,
)
from runtime.codecs.shm_tensors import ShmBinding
from runtime.errors import (
    InvalidInput,
    ServerStopping,
    ServingError,
    as_serving_error,
    is_refusal,
)
from runtime.header_forward import forwarded_headers
from runtime.inference import InferRequest
from runtime.observe.tracing import RequestTracer, Trace, frontend_trace
from thawserver.grpc_status import error_status
from thawserver.redaction import Redactor
from thawserver.shm_registry import SystemSharedMemory
from thawwire.grpc_messages import FINAL_RESPONSE, STREAM_STOPPING, stream_error
from thawwire.grpc_service import pb

if TYPE_CHECKING:
    from runtime.models.service import ModelService, StreamingModelService

__all__ = ["MAX_IN_FLIGHT", "in_model_words", "serve_stream"]

logger = logging.getLogger(__name__)

MAX_IN_FLIGHT = 256
"""Requests of one stream served at once; the stream is not read further until one is done."""

_GRPC_ERROR_HEADER = "triton_grpc_error"
_EMPTY_FINAL = "triton_enable_empty_final_response"


def in_model_words(manager: ModelService, exc: InvalidInput, model: str) -> InvalidInput:
    """`exc` as Triton's core words it for `model`, when that needs the model's inputs (an
    unknown datatype); `exc` itself otherwise, or when the model cannot say (not ready)."""
    if not isinstance(exc, UnknownDatatype):
        return exc
    try:
        inputs = manager.metadata(model, None)["inputs"]
    except ServingError:
        return exc
    return exc.for_model(model, {i["name"]: i["datatype"] for i in inputs})


async def serve_stream(
    manager: StreamingModelService,
    requests: AsyncIterator[bytes],
    context: grpc.aio.ServicerContext,
    redact: Redactor | None = None,
    *,
    forward: re.Pattern[str] | None = None,
    shared_memory: SystemSharedMemory | None = None,
    stopping: Callable[[], bool] = lambda: False,
    tracer: RequestTracer | None = None,
) -> None:
    """Serve one stream until the client half-closes it and every answer is written; error
    messages go out through `redact` (thawserver.redaction) when given. The stream's metadata
    matching `forward` (`--grpc-header-forward-pattern`) becomes parameters of each request.
    Regions its tensors name are looked up in `shared_memory` (without it, naming one is an
    error). Once `stopping()` (the server shuts down), a new request is answered in-stream with
    STREAM_STOPPING; those in flight are answered as usual. Each request is traced as a
    ModelInfer is (`tracer`: its GRPC_* activities, each answer's write)."""
    metadata = context.invocation_metadata() or ()
    grpc_errors = any(
        key == _GRPC_ERROR_HEADER and str(value).lower() == "true" for key, value in metadata
    )
    stream = _Stream(
        manager, context, grpc_errors=grpc_errors, redact=redact,
        headers=forwarded_headers(forward, metadata), shared_memory=shared_memory,
        stopping=stopping, tracer=tracer,
    )  # fmt: skip
    await stream.run(requests)


class _Stream:
    def __init__(
        self,
        manager: StreamingModelService,
        context: grpc.aio.ServicerContext,
        *,
        grpc_errors: bool,
        redact: Redactor | None = None,
        headers: dict[str, str] | None = None,
        shared_memory: SystemSharedMemory | None = None,
        stopping: Callable[[], bool] = lambda: False,
        tracer: RequestTracer | None = None,
    ) -> None:
        self._manager = manager
        self._tracer = tracer
        self._stopping = stopping
        self._shm = shared_memory
        self._headers = headers or {}  # forwarded into every request's parameters
        self._context = context
        self._redact = redact
        self._grpc_errors = grpc_errors
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._tasks: set[asyncio.Task[None]] = set()
        self._write_lock = asyncio.Lock()  # grpc.aio allows one write at a time
        # The "written" future of the last request whose answers keep request order.
        self._tail: asyncio.Future[None] | None = None
        self._decoupled: dict[tuple[str, str], bool] = {}
        self._failed: asyncio.Future[ServingError] = asyncio.get_running_loop().create_future()

    async def run(self, requests: AsyncIterator[bytes]) -> None:
        reading = asyncio.ensure_future(self._read(requests))
        try:
            first: set[asyncio.Future[Any]] = {reading, self._failed}
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            if not self._failed.done():
                reading.result()  # the client half-closed (or the read failed: raise it)
                while self._tasks and not self._failed.done():
                    waits: set[asyncio.Future[Any]] = {*self._tasks, self._failed}
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if self._failed.done():
                exc = self._failed.result()
                await self._context.abort(
                    error_status(exc.status, exc.grpc_code), self._message(exc)
                )
        except asyncio.CancelledError:
            # The client cancelled the stream: its requests still queued will not run.
            logger.debug("Cancellation notification received for ModelStreamInfer")
            raise
        finally:
            # Client gone, stream aborted, or done: nothing of this stream runs on.
            pending = [reading, *self._tasks]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _read(self, requests: AsyncIterator[bytes]) -> None:
        async for data in requests:
            received_ns = time.perf_counter_ns()
            await self._slots.acquire()  # released when the request is answered
            try:
                message, bad = await self._parse(data)
            except BaseException:
                self._slots.release()
                raise
            if bad is None and self._stopping():
                bad = ServerStopping(STREAM_STOPPING)
            self._start(message, bad, received_ns)

    async def _parse(self, data: bytes) -> tuple[Any, ServingError | None]:
        try:
            if len(data) > THREAD_THRESHOLD_BYTES:
                return await asyncio.to_thread(pb.ModelInferRequest.FromString, data), None
            return pb.ModelInferRequest.FromString(data), None
        except DecodeError as exc:
            return pb.ModelInferRequest(), InvalidInput(f"the request could not be parsed: {exc}")

    def _start(self, message: Any, bad: ServingError | None, received_ns: int) -> None:
        turn: asyncio.Future[None] | None = None
        written: asyncio.Future[None] | None = None
        if bad is not None or not self._is_decoupled(message.model_name, message.model_version):
            turn, written = self._tail, asyncio.get_running_loop().create_future()
            self._tail = written
        task = asyncio.create_task(self._serve(message, bad, turn, written, received_ns))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _is_decoupled(self, model: str, version: str) -> bool:
        """Whether a model's answers may leave out of request order (asked once per stream):
        a decoupled model's, and an ensemble's with a decoupled step (its many responses)."""
        key = (model, version)
        found = self._decoupled.get(key)
        if found is None:
            found = self._manager.answers_as_they_come(model, version or None)
            self._decoupled[key] = found
        return found

    async def _serve(
        self,
        message: Any,
        bad: ServingError | None,
        turn: asyncio.Future[None] | None,
        written: asyncio.Future[None] | None,
        received_ns: int,
    ) -> None:
        # Regions the request names stay leased (in use) until its last answer is written.
        shm = ShmBinding(self._shm) if self._shm is not None else None
        trace: Trace | None = None
        try:
            try:
                if bad is not None:
                    raise bad
                request = await self._decoded(message, shm)
                arrived = ("GRPC_WAITREAD_START", received_ns)
                trace = frontend_trace(self._tracer, request, arrived, "GRPC_WAITREAD_END")
                await self._answer(request, turn, shm)
            except ServingError as exc:
                await self._error(message, exc, turn)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("unexpected error serving a gRPC stream request")
                await self._error(message, ServingError("internal server error"), turn)
        finally:
            if trace is not None:
                trace.end()
            if shm is not None:
                shm.release()
            if written is not None and not written.done():
                written.set_result(None)
            self._slots.release()

    async def _decoded(self, message: Any, shm: ShmBinding | None) -> InferRequest:
        try:
            if message.ByteSize() > THREAD_THRESHOLD_BYTES:
                request = await asyncio.to_thread(decode_model_infer, message, shm=shm)
            else:
                request = decode_model_infer(message, shm=shm)
            request.parameters.update(self._headers)
            return request
        except InvalidInput as exc:
            # A bad request for a model that does not exist is a NOT_FOUND first.
            self._manager.model_ready(*message_ref(message.model_name, message.model_version))
            raise in_model_words(self._manager, exc, message.model_name) from None

    async def _answer(
        self, request: InferRequest, turn: asyncio.Future[None] | None, shm: ShmBinding | None
    ) -> None:
        final = False
        async for response in self._manager.stream(request):
            if response.flag_only:
                # The model's bare final flag (no response): like Triton, only a client that
                # asked for empty final responses gets one (below); it has no outputs to send.
                continue
            if response.error is not None:
                await self._model_error(request, response.error, turn)
                turn = None
                continue
            trace = request.trace
            if trace is not None:
                trace.add("INFER_RESPONSE_COMPLETE", time.perf_counter_ns())
            if sum(t.data.nbytes for t in response.outputs) > THREAD_THRESHOLD_BYTES:
                encoded = await asyncio.to_thread(_encoded, response, request, shm)
            else:
                encoded = _encoded(response, request, shm)
            if trace is not None:
                trace.add("GRPC_SEND_START", time.perf_counter_ns())
            await self._write(encoded, turn)
            if trace is not None:
                trace.add("GRPC_SEND_END", time.perf_counter_ns())
            turn, final = None, response.final
        if not final and request.parameters.get(_EMPTY_FINAL) is True:
            empty = pb.ModelStreamInferResponse()
            answer = empty.infer_response
            answer.id = request.id or ""
            answer.model_name = request.model_name
            answer.model_version = request.model_version
            answer.parameters[FINAL_RESPONSE].bool_param = True
            await self._write(empty.SerializeToString(), turn)

    async def _error(
        self, message: Any, exc: ServingError, turn: asyncio.Future[None] | None
    ) -> None:
        if self._grpc_errors and not is_refusal(exc):
            if turn is not None:
                await asyncio.shield(turn)  # the earlier ordered requests' answers go first
            if not self._failed.done():
                self._failed.set_result(exc)
            return
        if exc.status >= 500:
            logger.warning("gRPC stream request failed: %s", exc.message)
        answer = stream_error(
            self._message(exc),
            request_id=message.id,
            model_name=message.model_name,
            model_version=message.model_version,
        )
        await self._write(answer.SerializeToString(), turn)

    async def _model_error(
        self, request: InferRequest, exc: Exception, turn: asyncio.Future[None] | None
    ) -> None:
        """An error response the model sent without the final flag: answered in the stream,
        not final, and the request goes on (Triton 2.51); with `triton_grpc_error` it ends
        the stream, as every error of a request that ran does."""
        error = as_serving_error(exc)
        if self._grpc_errors:
            raise error
        answer = stream_error(
            self._message(error),
            request_id=request.id or "",
            model_name=request.model_name,
            model_version=request.model_version,
            final=False,
        )
        await self._write(answer.SerializeToString(), turn)

    def _message(self, exc: ServingError) -> str:
        return self._redact(exc.message) if self._redact is not None else exc.message

    async def _write(self, data: bytes, turn: asyncio.Future[None] | None) -> None:
        if turn is not None:
            await asyncio.shield(turn)  # the earlier ordered request's answer goes first
        async with self._write_lock:
            with contextlib.suppress(asyncio.InvalidStateError):  # the call already ended
                await self._context.write(data)


def _encoded(response: Any, request: InferRequest, shm: ShmBinding | None) -> bytes:
    answer = pb.ModelStreamInferResponse()
    encode_model_infer(response, request, final=response.final, into=answer.infer_response, shm=shm)
    return bytes(answer.SerializeToString())
