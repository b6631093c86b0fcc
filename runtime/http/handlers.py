"""Thin KServe v2 handlers: decode the HTTP request, call the ModelManager, encode the answer."""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections.abc import Coroutine
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from runtime.codecs.body import decode_content, parse_json, read_capped, too_large
from runtime.codecs.generate import decode_generate, encode_generate, sse_event
from runtime.codecs.rest import EncodedResponse, decode_infer_request, encode_infer_response
from runtime.codecs.shm_tensors import ShmBinding
from runtime.config import ModelControlMode, ServeConfig
from runtime.direct.send_back import SEND_BACK, SendBack
from runtime.errors import (
    BodyTimeout,
    ControlDisabled,
    InvalidInput,
    JsonTooDeep,
    ModelNotFound,
    ModelUnavailable,
    Restricted,
    ServingError,
    as_serving_error,
    is_refusal,
)
from runtime.header_forward import forwarded_headers
from runtime.http.front_outcome import TOKEN_HEADER, FrontLink, grpc_outcome, outcome_error
from runtime.http.response_encoding import MIN_COMPRESS_BYTES, compress_body, pick_encoding
from runtime.inference import InferRequest
from runtime.models.lifecycle import ServerState
from runtime.models.load_errors import refused_overrides
from runtime.models.load_overrides import overrides_from_json, unload_dependents_from_json
from runtime.models.service import ModelService, server_live, server_ready
from runtime.observe.tracing import RequestTracer, Trace, frontend_trace
from thawserver import fast_json
from thawserver.body_deadline import body_timeout_message
from thawserver.body_limit import body_cap
from thawserver.json_response import json_response
from thawserver.restricted_protocols import Category
from thawserver.restricted_routes import Route, route_guard
from thawserver.shm_registry import SystemSharedMemory
from thawwire.internal_calls import HEADER as INTERNAL_HEADER
from thawwire.load_answer import warmup_header
from thawwire.model_control import CONTROL_DISABLED
from thawwire.names import (
    canonical_version,
    is_digits,
    is_model_name,
    unknown_model,
    version_refusal,
)
from thawwire.server_info import server_metadata
from thawwire.shm_params import names_shared_memory

__all__ = [
    "CLIENT_GONE_STATUS",
    "MetricsSource",
    "ModelService",
    "V2Handlers",
    "json_response",
    "model_ref",
    "server_ready",
]

CLIENT_GONE_STATUS = 499
"""nginx's "client closed request": the status logged for a request whose client left before
its answer (no one reads it)."""
# Bodies above this are decoded and encoded in a worker thread, so the event loop keeps serving.
_THREAD_THRESHOLD_BYTES = 256 * 1024
_JSON = "application/json"
_JSON_BODY = "request JSON"
# Triton's text when /generate gets other than one response (2.51).
_GENERATE_ONE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that "
    "generates various number of responses"
)
_SSE = "text/event-stream; charset=utf-8"
# Triton's texts (main, after 2.51).
# A signed decimal, as Triton reads the header (`+16` is 16; `-1` and 10^22 are out of range).
_HEADER_LENGTH = re.compile(r"[+-]?[0-9]{1,40}")
_READY_NOT_BOOL = "Invalid value for 'ready': expected a boolean"


class MetricsSource(Protocol):
    """The server's metrics (runtime.observe.metrics.Metrics): renders the `/metrics` text body."""

    def exposition(self) -> bytes: ...


def model_ref(request: web.Request) -> tuple[str, str | None]:
    """The model name and optional version from the URL; 404 for anything that is not a name."""
    name = request.match_info["model"]
    if not is_model_name(name):
        raise ModelNotFound(unknown_model(name))
    version = request.match_info.get("version")
    if version is None:
        return name, None
    canonical = canonical_version(version)
    if canonical is None:
        # Triton routes digits only; digits past int64 are its `std::stol` refusal (400).
        if is_digits(version):
            raise InvalidInput(version_refusal(version[:40]))
        raise ModelNotFound(f"invalid version {version[:40]!r} for model '{name}'")
    return name, canonical  # `01` is version 1, as in Triton


class V2Handlers:
    """The v2 endpoints, bound to one server's config, model service, metrics and state."""

    def __init__(
        self,
        config: ServeConfig,
        manager: ModelService,
        metrics: MetricsSource,
        state: ServerState,
        *,
        shared_memory: SystemSharedMemory | None = None,
        tracer: RequestTracer | None = None,
    ) -> None:
        self._config = config
        # Where an infer request's trace begins (its HTTP_* activities: runtime.observe.tracing).
        self._tracer = tracer
        # The system shared-memory regions of this server's clients (runtime.shm_api).
        self._shm = shared_memory if shared_memory is not None else SystemSharedMemory()
        self._manager = manager
        # A failed load's reason in the index, as every error body (thawserver.redaction).
        self._redact = config.redactor
        self._metrics = metrics
        self._state = state
        # Compact, as Triton's (and the activator's) `/v2` is.
        self._server_metadata = fast_json.dumps(server_metadata(config.server_id))
        self._forward = config.http_header_forward
        self._guard = route_guard(config.http_restrictions, Restricted)
        # Only a replica `thaw up` hands connections to has requests to send back
        # (runtime.direct.routing sets SEND_BACK on those): the rest skip the lookup.
        self._sends_back = config.handoff_socket is not None
        # The native front answering hot models' infers (`--front native`; runtime.process
        # .server sets it): its statistics are added in before any are read.
        self.front: FrontLink | None = None

    def restricted(self, category: Category, handler: Route) -> Route:
        """`handler`, or, when `--http-restricted-api` restricts its category, a handler that
        first answers a request without the header 403, in Triton's words
        (thawserver.restricted_routes)."""
        return self._guard(category, handler)

    def _forward_headers(self, request: web.Request, infer_request: InferRequest) -> None:
        """`--http-header-forward-pattern`: matching headers become request parameters."""
        if self._forward is not None:
            infer_request.parameters.update(forwarded_headers(self._forward, request.raw_headers))

    @property
    def shared_memory(self) -> SystemSharedMemory:
        """The registry this server's inference reads and writes regions through."""
        return self._shm

    @property
    def body_timeout_s(self) -> float:
        """How long a request body may take to arrive (`--body-timeout-s`)."""
        return self._config.body_timeout_s

    @property
    def tracer(self) -> RequestTracer | None:
        return self._tracer

    @property
    def behind_native_front(self) -> bool:
        return self._config.http_front == "native"

    @property
    def metrics_enabled(self) -> bool:
        return self._config.allow_metrics

    async def _body(self, request: web.Request, *, what: str = _JSON_BODY) -> bytes:
        """The request body, decompressed, under the configured cap (`what` names it in a 413)."""
        # A BLS call or an ensemble step of this deployment has its own cap (body_cap).
        limit, flag = body_cap(
            self._config.internal_calls,
            request.headers.get(INTERNAL_HEADER),
            public=self._config.max_body_bytes,
        )
        content = request.content
        if content.is_eof():
            # The usual small request arrived with its headers: take the buffer as it is.
            raw = content.read_nowait()
            if len(raw) > limit:
                raise too_large(limit, size=len(raw), what=what, flag=flag)
        else:
            reading = read_capped(
                content.iter_any(),
                limit=limit,
                declared_length=request.content_length,
                what=what,
                flag=flag,
            )
            raw = await _within(reading, self._config.body_timeout_s)
        encoding = request.headers.get("Content-Encoding")
        if encoding is None:
            return raw
        decode = functools.partial(decode_content, raw, encoding, limit=limit, what=what, flag=flag)
        if len(raw) > _THREAD_THRESHOLD_BYTES:
            return await asyncio.to_thread(decode)
        return decode()

    async def _json_body(self, request: web.Request) -> dict[str, Any]:
        """An optional JSON object body ({} when empty)."""
        body = await self._body(request)
        if not body.strip():
            return {}
        doc = parse_json(body, max_depth=self._config.max_json_depth)
        if not isinstance(doc, dict):
            raise InvalidInput("request body must be a JSON object")
        return doc

    # -- health and metadata -------------------------------------------------------------

    async def live(self, request: web.Request) -> web.Response:
        if not server_live(self._state):
            raise ModelUnavailable("server is not live")
        return web.Response(status=200)

    async def ready(self, request: web.Request) -> web.Response:
        if not server_ready(self._config, self._manager, self._state):
            raise ModelUnavailable("server is not ready")
        return web.Response(status=200)

    async def server_metadata(self, request: web.Request) -> web.Response:
        return web.Response(body=self._server_metadata, content_type=_JSON)

    async def model_metadata(self, request: web.Request) -> web.Response:
        name, version = model_ref(request)
        return json_response(self._manager.metadata(name, version))

    async def model_ready(self, request: web.Request) -> web.Response:
        name, version = model_ref(request)
        if not self._manager.model_ready(name, version):
            raise ModelUnavailable(f"model '{name}' is not ready")
        return web.Response(status=200)

    async def model_config(self, request: web.Request) -> web.Response:
        name, version = model_ref(request)
        return json_response(self._manager.config(name, version))

    async def sync_front_stats(self) -> None:
        """Add what the native front answered to the statistics (`--front native`)."""
        if self.front is not None:
            await self.front.sync_stats()

    async def model_stats(self, request: web.Request) -> web.Response:
        await self.sync_front_stats()
        if "model" not in request.match_info:
            return json_response(self._manager.statistics(None, None))
        name, version = model_ref(request)
        return json_response(self._manager.statistics(name, version))

    async def metrics(self, request: web.Request) -> web.Response:
        await self.sync_front_stats()
        response = web.Response(body=self._metrics.exposition())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    async def front_outcome(self, request: web.Request) -> web.Response:
        """An infer the native front sent to a stub itself that did not succeed: answered (and
        counted) here, as this server answers it (runtime.http.front_outcome)."""
        front = self.front
        if front is None or not front.admits(request.headers.get(TOKEN_HEADER)):
            raise web.HTTPNotFound()  # as any path this server does not serve
        doc = await self._json_body(request)
        error, answered = outcome_error(doc)
        front.record_outcome(
            str(doc.get("model", "")), str(doc.get("version", "")),
            _count(doc.get("batch_size")), _count(doc.get("request_ns")), answered,
        )  # fmt: skip
        if doc.get("surface") == "grpc":
            return json_response(grpc_outcome(error, self._redact))
        raise error

    # -- inference -----------------------------------------------------------------------

    async def infer(self, request: web.Request) -> web.StreamResponse:
        received_ns = time.perf_counter_ns()
        name, version = model_ref(request)
        tracer = self._tracer
        if tracer is None or not tracer.settings.maybe_tracing:
            return await self._answer(request, name, version, None)
        trace = tracer.begin(name)  # sampled as Triton's HTTP frontend samples
        trace.add("HTTP_RECV_START", received_ns)
        try:
            response = await self._answer(request, name, version, trace)
            if trace.sampled:
                await _sent(request, response, trace)
            return response
        finally:
            trace.end()

    def _traced(self, infer_request: InferRequest, received_ns: int) -> Trace | None:
        """A generate request's trace, begun (None: tracing is off); its body was read and
        decoded by now."""
        arrived = ("HTTP_RECV_START", received_ns)
        return frontend_trace(self._tracer, infer_request, arrived, "HTTP_RECV_END")

    async def _answer(
        self, request: web.Request, name: str, version: str | None, trace: Trace | None
    ) -> web.StreamResponse:
        header_length = _header_length(request)
        # Triton names a JSON body "request JSON" in its size errors, and the rest "request".
        body = await self._body(request, what=_JSON_BODY if header_length is None else "request")
        if trace is not None:
            trace.add("HTTP_RECV_END", time.perf_counter_ns())
        if self._sends_back:
            send_back: SendBack | None = request.get(SEND_BACK)
            if send_back is not None and _names_client_shm(request, body, header_length):
                # The regions are `thaw up`'s (runtime.direct.send_back).
                return await send_back(request, body)
        # Regions the request names are leased until its response is encoded (in use).
        shm = ShmBinding(self._shm)
        try:
            encoded = await self._infer(request, body, header_length, name, version, shm, trace)
        finally:
            shm.release()
        accept = request.headers.get("Accept-Encoding")
        if accept and len(encoded.body) >= MIN_COMPRESS_BYTES:
            return await _compressed_response(encoded, accept)
        return _infer_http_response(encoded.body, encoded.header_length)

    async def _infer(
        self,
        request: web.Request,
        body: bytes,
        header_length: int | None,
        name: str,
        version: str | None,
        shm: ShmBinding,
        trace: Trace | None = None,
    ) -> EncodedResponse:
        decode = functools.partial(
            decode_infer_request,
            body,
            header_length=header_length,
            model_name=name,
            model_version=version or "",
            max_json_depth=self._config.max_json_depth,
            shm=shm,
        )
        try:
            # Small bodies (nearly all) are decoded inline: a thread hop costs more than that.
            if len(body) > _THREAD_THRESHOLD_BYTES:
                infer_request = await asyncio.to_thread(decode)
            else:
                infer_request = decode()
        except InvalidInput:
            # A bad body for a model that does not exist is a 404 first (checked only here,
            # so the hot path pays nothing for it).
            self._manager.model_ready(name, version)
            raise
        self._forward_headers(request, infer_request)
        if trace is not None:
            trace.request_id = infer_request.id or ""
            infer_request.trace = trace
        infer_response = await self._manager.infer(infer_request)
        if trace is not None:
            trace.add("INFER_RESPONSE_COMPLETE", time.perf_counter_ns())
        output_bytes = 0
        for tensor in infer_response.outputs:
            output_bytes += tensor.data.nbytes
        encode = functools.partial(encode_infer_response, infer_response, infer_request, shm)
        if output_bytes > _THREAD_THRESHOLD_BYTES:
            return await asyncio.to_thread(encode)
        return encode()

    # -- generate extension (decoupled models over HTTP) --------------------------------

    async def _generate_request(self, request: web.Request) -> InferRequest:
        name, version = model_ref(request)
        body = await self._body(request)
        metadata = self._manager.metadata(name, version)  # 404 / 503 before the body matters
        infer_request = decode_generate(
            body,
            model=name,
            version=version or "",
            metadata=metadata,
            max_depth=self._config.max_json_depth,
        )
        self._forward_headers(request, infer_request)
        return infer_request

    async def generate(self, request: web.Request) -> web.StreamResponse:
        """POST .../generate: exactly one response, as a flat JSON object."""
        received_ns = time.perf_counter_ns()
        infer_request = await self._generate_request(request)
        trace = self._traced(infer_request, received_ns)
        try:
            stream = self._manager.stream(infer_request)
            responses = [r async for r in stream if not r.flag_only]
            if trace is not None:
                trace.add("INFER_RESPONSE_COMPLETE", time.perf_counter_ns())
            if len(responses) != 1:
                raise ServingError(_GENERATE_ONE)
            response = json_response(encode_generate(responses[0].checked()))
            if trace is not None and trace.sampled:
                await _sent(request, response, trace)
            return response
        finally:
            if trace is not None:
                trace.end()

    async def generate_stream(self, request: web.Request) -> web.StreamResponse:
        """POST .../generate_stream: each response as a Server-Sent Event, as it is sent.

        A request refused before the model saw it gets a plain JSON error; the model's own
        errors are events `{"error": ...}` (its status only if it is the first event; redacted
        as every error body), and one the model sent without the final flag does not end the
        stream (as Triton's)."""
        received_ns = time.perf_counter_ns()
        infer_request = await self._generate_request(request)
        trace = self._traced(infer_request, received_ns)
        stream = self._manager.stream(infer_request)
        response: web.StreamResponse | None = None
        try:
            async for item in stream:
                if item.flag_only:
                    continue
                if item.error is not None:
                    exc = as_serving_error(item.error)
                    if response is None:
                        response = await self._start_sse(request, exc.status)
                    await response.write(sse_event({"error": self._redact(exc.message)}))
                    continue
                if response is None:
                    response = await self._start_sse(request, 200)
                if trace is not None:
                    trace.add("INFER_RESPONSE_COMPLETE", time.perf_counter_ns())
                    trace.add("HTTP_SEND_START", time.perf_counter_ns())
                await response.write(sse_event(encode_generate(item)))
                if trace is not None:
                    trace.add("HTTP_SEND_END", time.perf_counter_ns())
        except ServingError as exc:
            if response is None:
                if is_refusal(exc):
                    raise  # refused before the model saw it: a plain JSON error
                response = await self._start_sse(request, exc.status)
            await response.write(sse_event({"error": self._redact(exc.message)}))
        except ConnectionResetError:
            return response or web.Response(status=CLIENT_GONE_STATUS)
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
            if trace is not None:
                trace.end()
        if response is None:
            response = await self._start_sse(request, 200)
        await response.write_eof()
        return response

    async def _start_sse(self, request: web.Request, status: int) -> web.StreamResponse:
        response = web.StreamResponse(status=status)
        response.headers["Content-Type"] = _SSE
        await response.prepare(request)
        return response

    # -- model repository extension ------------------------------------------------------

    async def repository_index(self, request: web.Request) -> web.Response:
        try:
            doc = await self._json_body(request)
        except JsonTooDeep as exc:
            if exc.member != "ready":
                raise
            doc = {"ready": None}  # nested that deep, it is no boolean
        ready = doc.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidInput(_READY_NOT_BOOL)
        rows = await self._manager.index(ready_only=ready)
        return json_response(self._redact.index(rows))

    async def load(self, request: web.Request) -> web.Response:
        name, _ = model_ref(request)
        self._require_explicit()
        params = _load_parameters(await self._json_body(request))
        try:
            config_json, files = overrides_from_json(params)
        except InvalidInput as exc:
            raise refused_overrides(name, exc) from None
        warmup_s = await self._manager.load(name, config_json=config_json, files=files)
        return web.Response(status=200, headers=warmup_header(warmup_s or 0.0))

    async def unload(self, request: web.Request) -> web.Response:
        name, _ = model_ref(request)
        self._require_explicit()
        params = _load_parameters(await self._json_body(request))
        dependents = unload_dependents_from_json(params)
        await self._manager.unload(name, unload_dependents=dependents)
        return web.Response(status=200)

    def _require_explicit(self) -> None:
        """Triton allows load/unload requests only in explicit model control mode.

        Its message and its code (observed on 2.51, for none and poll alike): 503, UNAVAILABLE.
        """
        if self._config.model_control_mode is not ModelControlMode.EXPLICIT:
            raise ControlDisabled(CONTROL_DISABLED)


def _names_client_shm(request: web.Request, body: bytes, header_length: int | None) -> bool:
    """Whether a handed-off request may name shared-memory regions (a byte search of its
    JSON header; a compressed body is answered here, as it came)."""
    if header_length == 0 or not names_shared_memory(body, header_length):
        return False
    return "Content-Encoding" not in request.headers


async def _within(reading: Coroutine[Any, Any, bytes], timeout_s: float) -> bytes:
    """Await a body read, but never longer than `timeout_s` (a slow or lying client gets 408,
    thawserver.body_deadline)."""
    try:
        async with asyncio.timeout(timeout_s):
            return await reading
    except TimeoutError:
        raise BodyTimeout(body_timeout_message(timeout_s)) from None


async def _sent(request: web.Request, response: web.StreamResponse, trace: Trace) -> None:
    """Write `response` now (not after the handler returns), to time the write in `trace`."""
    trace.add("HTTP_SEND_START", time.perf_counter_ns())
    await response.prepare(request)
    await response.write_eof()
    trace.add("HTTP_SEND_END", time.perf_counter_ns())


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _header_length(request: web.Request) -> int | None:
    """The Inference-Header-Content-Length header as an int, if present: a decimal integer,
    signed as Triton reads it; one outside the body (negative, past its end) is refused with
    Triton's range text where the body is split (runtime.codecs.rest)."""
    value = request.headers.get("Inference-Header-Content-Length")
    if value is None:
        return None
    if _HEADER_LENGTH.fullmatch(value) is None:
        raise InvalidInput(f"invalid Inference-Header-Content-Length {value[:40]!r}")
    return int(value)


async def _compressed_response(encoded: EncodedResponse, accept: str) -> web.Response:
    """An encoded infer response large enough to compress, compressed when the client accepts
    gzip/deflate (`accept`: its Accept-Encoding)."""
    body = encoded.body
    coding = pick_encoding(accept)
    if coding is None:
        return _infer_http_response(body, encoded.header_length)
    if len(body) > _THREAD_THRESHOLD_BYTES:
        body = await asyncio.to_thread(compress_body, body, coding)
    else:
        body = compress_body(body, coding)
    response = _infer_http_response(body, encoded.header_length)
    response.headers["Content-Encoding"] = coding
    return response


def _infer_http_response(body: bytes, header_length: int | None) -> web.Response:
    """An infer response's body as it goes out: JSON, or a JSON header and binary tensors."""
    if header_length is None:
        return web.Response(body=body, content_type=_JSON)
    response = web.Response(body=body, content_type="application/octet-stream")
    response.headers["Inference-Header-Content-Length"] = str(header_length)
    return response


def _load_parameters(doc: dict[str, Any]) -> dict[str, Any]:
    """The `parameters` object of a load/unload body."""
    params = doc.get("parameters", {})
    if not isinstance(params, dict):
        raise InvalidInput("'parameters' must be a JSON object")
    return params
