"""The runtime's aiohttp application: THE v2 route table, the JSON error middleware, lifecycle."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from runtime.config import ServeConfig
from runtime.direct_routing import DirectRouting
from runtime.errors import ServingError
from runtime.front_door_client import FrontDoorClient
from runtime.handlers import MetricsSource, ModelService, V2Handlers, json_response
from runtime.lifecycle import ServerState, lifecycle_context
from thawwire.paths import MODEL, MODEL_VERSION

__all__ = ["RUNNER_OPTIONS", "SERVER_STATE", "build_app", "error_middleware"]

logger = logging.getLogger(__name__)

SERVER_STATE: web.AppKey[ServerState] = web.AppKey("server_state", ServerState)

# How the app must be run (AppRunner keyword arguments): aiohttp must not decompress request
# bodies itself, or the body cap in runtime.body would only see the compressed size.
RUNNER_OPTIONS: dict[str, Any] = {"auto_decompress": False, "access_log": None}

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_routes(app: web.Application, h: V2Handlers) -> None:
    """THE route table of the v2 surface (GET routes also answer HEAD)."""
    model, versioned = MODEL, MODEL_VERSION
    r = app.router
    # The router tries routes in this order: the hot one first.
    for prefix in (model, versioned):
        r.add_post(prefix + "/infer", h.infer)
    for prefix in (model, versioned):
        r.add_post(prefix + "/generate", h.generate)
        r.add_post(prefix + "/generate_stream", h.generate_stream)
    r.add_get("/v2/health/live", h.live)
    r.add_get("/v2/health/ready", h.ready)
    r.add_get("/v2", h.server_metadata)
    r.add_get("/v2/models/stats", h.model_stats)  # before {model}, which would also match
    for prefix in (model, versioned):
        r.add_get(prefix, h.model_metadata)
        r.add_get(prefix + "/ready", h.model_ready)
        r.add_get(prefix + "/config", h.model_config)
        r.add_get(prefix + "/stats", h.model_stats)
    r.add_post("/v2/repository/index", h.repository_index)
    r.add_post("/v2/repository/models/{model}/load", h.load)
    r.add_post("/v2/repository/models/{model}/unload", h.unload)
    r.add_get("/metrics", h.metrics)


@web.middleware
async def error_middleware(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Every error leaves as `{"error": message}` with its status, aiohttp's own included."""
    try:
        return await handler(request)
    except ServingError as exc:
        if exc.status >= 500:
            logger.warning("%s %s -> %d: %s", request.method, request.path, exc.status, exc)
        return _error_response(exc.status, exc.message)
    except web.RequestPayloadError as exc:
        # Malformed chunked framing, or a body cut short by the client.
        return _error_response(400, f"request body could not be read: {exc}")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = _error_response(exc.status, exc.reason)
        if "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("unexpected error in %s %s", request.method, request.path)
        return _error_response(500, "internal server error")


def _error_response(status: int, message: str) -> web.Response:
    response = json_response({"error": message}, status=status)
    if status == 413:
        # The rest of an oversized body is never read; closing beats draining it.
        response.force_close()
    return response


def build_app(
    config: ServeConfig,
    manager: ModelService,
    metrics: MetricsSource,
    *,
    warmups: tuple[Callable[[], object], ...] = (),
) -> web.Application:
    """The v2 application for one server; the manager starts and stops with the app.

    `warmups` are blocking calls (e.g. pre-faulting a restore arena) run in a thread, after
    `--preload-frameworks` imports and before the manager starts and readiness turns on.
    """
    app = web.Application(middlewares=[error_middleware], client_max_size=config.max_body_bytes)
    state = ServerState()
    app[SERVER_STATE] = state
    add_routes(app, V2Handlers(config, manager, metrics, state))
    if config.handoff_socket is not None and config.front_door is not None:
        # `thaw up` hands this replica client connections: route their requests.
        front_door = FrontDoorClient(config.front_door, timeout_s=config.exit_timeout_s + 300)
        routing = DirectRouting(
            is_loaded=_loaded(manager),
            front_door=front_door,
            max_age_s=config.handoff_max_age_s,
        )
        routing.install(app)
    app.cleanup_ctx.append(
        lifecycle_context(
            state,
            frameworks=config.preload_frameworks,
            warmups=warmups,
            start=manager.start,
            stop=manager.stop,
            stop_timeout_s=config.exit_timeout_s,
        )
    )
    return app


def _loaded(manager: ModelService) -> Callable[[str], bool]:
    def is_loaded(model: str) -> bool:
        try:
            return manager.model_ready(model, None)
        except ServingError:
            return False

    return is_loaded
