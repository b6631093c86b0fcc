"""The runtime's aiohttp application: THE v2 route table, the JSON error middleware, lifecycle."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from runtime.config import ServeConfig
from runtime.direct.front_door import FrontDoor
from runtime.direct.routing import DirectRouting
from runtime.errors import ModelNotLoaded, RepositoryError, ServingError, UnsupportedEncoding
from runtime.http.cloud_front import fix_response_headers
from runtime.http.front_outcome import OUTCOME_PATH
from runtime.http.handlers import CLIENT_GONE_STATUS, MetricsSource, V2Handlers
from runtime.models.lifecycle import ServerState, lifecycle_context
from runtime.models.service import ModelService
from runtime.observe.tracing import RequestTracer
from runtime.openai.handlers import OpenAIHandlers
from runtime.openai.handlers import add_routes as add_openai_routes
from thawserver.connection_guard import ConnectionGuard
from thawserver.json_response import json_response
from thawserver.log_control import LogControl
from thawserver.log_records import TABLE, table
from thawserver.redaction import Redactor
from thawserver.restricted_protocols import Category
from thawserver.settings_api import LogTarget, SettingsApi
from thawserver.shm_api import RestSharedMemory
from thawserver.shm_registry import SystemSharedMemory
from thawserver.transfer_coding import coding_refusal
from thawwire import error_marks, openai_api
from thawwire.model_control import NOT_LOADED
from thawwire.paths import MODEL, MODEL_VERSION
from thawwire.trace_settings import TraceSettings

__all__ = [
    "CONNECTIONS",
    "HANDLERS",
    "MODELS",
    "RUNNER_OPTIONS",
    "SERVER_STATE",
    "SETTINGS",
    "SHARED_MEMORY",
    "build_app",
    "build_metrics_app",
    "error_middleware",
]

logger = logging.getLogger(__name__)

SERVER_STATE: web.AppKey[ServerState] = web.AppKey("server_state", ServerState)
# The app's handlers: the metrics port's app serves its `/metrics` (build_metrics_app).
HANDLERS: web.AppKey[V2Handlers] = web.AppKey("handlers", V2Handlers)
# The model service the handlers serve (its ready index names Vertex AI's default model).
MODELS: web.AppKey[ModelService] = web.AppKey("models", ModelService)
# The deadlines and connection cap of the listener that serves the app (its first middleware).
CONNECTIONS: web.AppKey[ConnectionGuard] = web.AppKey("connections", ConnectionGuard)
# The system shared-memory regions of this server's clients (thawserver.shm_registry).
SHARED_MEMORY: web.AppKey[SystemSharedMemory] = web.AppKey("shared_memory", SystemSharedMemory)
# The logging and trace extensions of this server (both surfaces: thawserver.settings_api).
SETTINGS: web.AppKey[SettingsApi] = web.AppKey("settings", SettingsApi)
# What error bodies must not show (the server's directories; thawserver.redaction).
REDACT: web.AppKey[Redactor] = web.AppKey("redact", Redactor)

# How the app must be run (AppRunner keyword arguments): aiohttp must not decompress request
# bodies itself, or the body cap in runtime.codecs.body would only see the compressed size.
RUNNER_OPTIONS: dict[str, Any] = {"auto_decompress": False, "access_log": None}

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_routes(app: web.Application, h: V2Handlers) -> None:
    """THE route table of the v2 surface (GET routes also answer HEAD); `g` wraps the routes
    of a category `--http-restricted-api` restricts (Triton's grouping)."""
    model, versioned = MODEL, MODEL_VERSION
    r, g = app.router, h.restricted
    # The router tries routes in this order: the hot one first.
    for prefix in (model, versioned):
        r.add_post(prefix + "/infer", g(Category.INFERENCE, h.infer))
    for prefix in (model, versioned):
        r.add_post(prefix + "/generate", g(Category.INFERENCE, h.generate))
        r.add_post(prefix + "/generate_stream", g(Category.INFERENCE, h.generate_stream))
    r.add_get("/v2/health/live", g(Category.HEALTH, h.live))
    r.add_get("/v2/health/ready", g(Category.HEALTH, h.ready))
    r.add_get("/v2", g(Category.METADATA, h.server_metadata))
    # before {model}, which would also match
    r.add_get("/v2/models/stats", g(Category.STATISTICS, h.model_stats))
    for prefix in (model, versioned):
        r.add_get(prefix, g(Category.METADATA, h.model_metadata))
        r.add_get(prefix + "/ready", g(Category.HEALTH, h.model_ready))
        r.add_get(prefix + "/config", g(Category.MODEL_CONFIG, h.model_config))
        r.add_get(prefix + "/stats", g(Category.STATISTICS, h.model_stats))
    r.add_post("/v2/repository/index", g(Category.MODEL_REPOSITORY, h.repository_index))
    r.add_post("/v2/repository/models/{model}/load", g(Category.MODEL_REPOSITORY, h.load))
    r.add_post("/v2/repository/models/{model}/unload", g(Category.MODEL_REPOSITORY, h.unload))
    shm = RestSharedMemory(h.shared_memory, body_timeout_s=h.body_timeout_s)
    shm.add_routes(r, lambda handler: g(Category.SHARED_MEMORY, handler))
    if h.metrics_enabled:  # tritonserver's --allow-metrics=false: no metrics anywhere
        r.add_get("/metrics", h.metrics)
    if h.behind_native_front:  # the front's own route: 404 to any other client
        r.add_post(OUTCOME_PATH, h.front_outcome)


def add_metrics_routes(app: web.Application, h: V2Handlers) -> None:
    """The route table of the metrics port (Triton's 8002): `/metrics` alone."""
    app.router.add_get("/metrics", h.metrics)


@web.middleware
async def error_middleware(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Every request is a verbose record ("HTTP request: POST /v2/models/m/infer"); every error
    leaves as `{"error": message}` with its status, aiohttp's own included (a
    model's own error, and a gRPC code its status cannot say, marked for the replica that
    reads it back: thawwire.error_marks);
    a request framed with a transfer coding other than `chunked` is refused first, with 501
    (thawserver.transfer_coding: checked here rather than in a middleware of its own, which
    every request would pay for)."""
    refusal = coding_refusal(request)
    if refusal is not None:
        return refusal
    if logger.isEnabledFor(logging.DEBUG):  # verbose: each request, as Triton's HTTP server
        logger.debug("HTTP request: %s %s", request.method, request.path)
    try:
        return await handler(request)
    except ServingError as exc:
        # A client's error is a verbose line (as Triton's "Infer failed: ..."); a readiness
        # probe's 503 is its answer (every replica start is polled until it is ready), not a
        # fault worth a warning.
        probe = exc.status == 503 and request.path.endswith(("/ready", "/live"))
        level = logging.WARNING if exc.status >= 500 and not probe else logging.DEBUG
        logger.log(level, "%s %s -> %d: %s", request.method, request.path, exc.status, exc)
        response = _error_response(request, exc.status, exc.message)
        if exc.from_model:
            response.headers[error_marks.FROM_MODEL] = "1"
        if exc.grpc_code:
            response.headers[error_marks.GRPC_CODE] = exc.grpc_code
        if isinstance(exc, ModelNotLoaded):
            response.headers[NOT_LOADED] = exc.model
        elif isinstance(exc, UnsupportedEncoding):
            response.headers["Accept-Encoding"] = exc.accept_encoding  # as Triton's answer
        return response
    except web.RequestPayloadError as exc:
        # Malformed chunked framing, or a body cut short by the client.
        message = f"request body could not be read: {exc}"
        return _error_response(request, 400, message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.reason
        if exc.status == 404 and openai_api.is_openai_path(request.path):
            message = openai_api.no_route_message(request.method, request.path)
        response = _error_response(request, exc.status, message)
        if "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except ConnectionResetError:
        if request.transport is not None:  # not this request's client gone: a fault of ours
            logger.exception("unexpected error in %s %s", request.method, request.path)
            return _error_response(request, 500, "internal server error")
        # The client (or the native front, for its client) closed the connection before its
        # body was all in: aiohttp fails the body's read with "Connection lost". Nobody is
        # left to answer, and it is no fault of the server's (a hostile client could fill
        # the error log with tracebacks otherwise): a verbose line, nginx's 499 for the log.
        logger.debug("%s %s: the client went away before its body was in", request.method,
                     request.path)  # fmt: skip
        return web.Response(status=CLIENT_GONE_STATUS)
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("unexpected error in %s %s", request.method, request.path)
        return _error_response(request, 500, "internal server error")


def _error_response(request: web.Request, status: int, message: str) -> web.Response:
    """`{"error": message}`; under `/v1`, OpenAI's error document (thawwire.openai_api), which
    the `openai` client parses."""
    # The repository and cache directories never reach a client (thawserver.redaction).
    redact = request.app.get(REDACT)
    text = redact(message) if redact is not None else message
    if openai_api.is_openai_path(request.path):
        response = json_response(openai_api.error_body(text, status=status), status=status)
    else:
        response = json_response({"error": text}, status=status)
    if status == 413:
        # The rest of an oversized body is never read; closing beats draining it.
        response.force_close()
    return response


def build_metrics_app(config: ServeConfig, handlers: V2Handlers) -> web.Application:
    """The metrics port's application (`--metrics-port`); same errors as the v2 app."""
    guard = ConnectionGuard(config.connections)
    app = web.Application(
        middlewares=[guard.middleware, error_middleware],
        client_max_size=1024,
    )
    app[CONNECTIONS] = guard
    app[REDACT] = config.redactor
    add_metrics_routes(app, handlers)
    return app


def build_app(
    config: ServeConfig,
    manager: ModelService,
    metrics: MetricsSource,
    *,
    warmups: tuple[Callable[[], object], ...] = (),
    front_door: FrontDoor | None = None,
    log: LogTarget | None = None,
    tracer: RequestTracer | None = None,
) -> web.Application:
    """The v2 application for one server; the manager starts and stops with the app.

    `warmups` are blocking calls (e.g. pre-faulting a restore arena) run in a thread, after
    `--preload-frameworks` imports and before the manager starts and readiness turns on.
    `front_door`: the replica's one client of `thaw up`'s front door (FrontDoor.from_config),
    which the manager shares; requests on handed-off connections go back through it, and the
    app closes it at cleanup, after the manager has stopped and those connections drained.
    """
    guard = ConnectionGuard(config.connections)
    app = web.Application(
        middlewares=[guard.middleware, error_middleware],
        client_max_size=config.max_body_bytes,
    )
    app[CONNECTIONS] = guard
    app[REDACT] = config.redactor
    state = ServerState()
    app[SERVER_STATE] = state
    app[SHARED_MEMORY] = shared_memory = SystemSharedMemory()
    handlers = V2Handlers(
        config, manager, metrics, state, shared_memory=shared_memory, tracer=tracer
    )
    app[HANDLERS] = handlers
    app[MODELS] = manager
    if config.allow_sagemaker:
        # SageMaker's infer answers carry its content type (runtime.http.cloud_front); only
        # then: a hook costs every response a call.
        app.on_response_prepare.append(fix_response_headers)
    add_routes(app, handlers)
    # `log`: the process's installed logging (runtime.process.cli); without one (an app built
    # in a test) the settings govern the root logger's level and filters only.
    # `tracer`: the manager's, whose settings the trace calls change (runtime.observe.tracing).
    app[SETTINGS] = settings = SettingsApi(
        log if log is not None else LogControl(config.log_settings),
        tracer.settings if tracer is not None else TraceSettings(config.trace_defaults),
        _loaded(manager),
        body_timeout_s=config.body_timeout_s,
    )
    settings.add_routes(app.router, handlers.restricted)
    add_openai_routes(
        app.router, OpenAIHandlers(config, manager), handlers.restricted, ready=handlers.ready
    )
    if config.handoff_socket is not None and front_door is not None:
        # `thaw up` hands this replica client connections: route their requests.
        routing = DirectRouting(
            is_loaded=_loaded(manager),
            front_door=front_door,
            max_age_s=config.handoff_max_age_s,
        )
        routing.install(app)
    app.on_cleanup.append(lambda _: _close(shared_memory))
    if tracer is not None:
        # After the manager has stopped (cleanup_ctx runs first): every record is in.
        app.on_cleanup.append(lambda _: asyncio.to_thread(tracer.close))
    if front_door is not None:
        # on_cleanup runs after cleanup_ctx (the manager's stop) and after the runner's drain.
        app.on_cleanup.append(lambda _: front_door.close())
    start = functools.partial(_start_and_list, manager, all_or_fail=bool(config.exit_on_error))
    if config.exit_on_error is False:  # else runtime.process.cli refuses a missing repository
        start = functools.partial(_refusing_missing, config.repositories, start)
    app.cleanup_ctx.append(
        lifecycle_context(
            state,
            frameworks=config.preload_frameworks,
            warmups=warmups,
            start=start,
            stop=manager.stop,
            stop_timeout_s=config.exit_timeout_s,
            exit_on_failure=config.exit_on_error is not False,
            prepare=manager.prepare,
        )
    )
    return app


async def _close(shared_memory: SystemSharedMemory) -> None:
    shared_memory.close()  # every region's descriptor


async def _start_and_list(manager: ModelService, *, all_or_fail: bool) -> None:
    """The manager's start, then tritonserver's table of the models it loaded (`| Model |
    Version | Status |`, a failed one's status `UNAVAILABLE: <reason>`), which operators read
    at a start; none when it loaded none (a `thaw up` replica, started empty in explicit mode).
    `all_or_fail`: tritonserver's `--exit-on-error=true`, a model that failed to load fails the
    start (the server then exits 1), with Triton's words and every model's reason."""
    await manager.start()
    index = [row for row in await manager.index() if row.get("state")]
    if index:
        rows = [(row["name"], row.get("version", ""), _status(row)) for row in index]
        logger.info("", extra={TABLE: table(("Model", "Version", "Status"), rows)})
    failed = [row for row in index if row["state"] == "UNAVAILABLE"]
    if all_or_fail and failed:
        reasons = "; ".join(f"{row['name']}: {row.get('reason', '')}" for row in failed)
        raise ServingError(f"failed to load all models: {reasons}")


def _status(row: dict[str, Any]) -> str:
    reason = row.get("reason")
    return f"{row['state']}: {reason}" if reason and row["state"] != "READY" else row["state"]


async def _refusing_missing(
    repositories: tuple[Path, ...], start: Callable[[], Awaitable[None]]
) -> None:
    """`start`, unless a repository is not there: then fail, in Triton's words."""
    missing = await asyncio.to_thread(lambda: [r for r in repositories if not r.is_dir()])
    if missing:
        raise RepositoryError(f"failed to stat file {missing[0]}")
    await start()


def _loaded(manager: ModelService) -> Callable[[str], bool]:
    def is_loaded(model: str) -> bool:
        try:
            return manager.model_ready(model, None)
        except ServingError:
            return False

    return is_loaded
