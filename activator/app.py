"""The activator's HTTP surface: one route table, thin handlers, one error middleware."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from activator.config import ActivatorConfig
from activator.errors import (
    ActivatorError,
    PayloadTooLarge,
    RouteNotFound,
    UpstreamFailed,
)
from activator.fleet import Fleet
from activator.metrics import Metrics
from activator.proxy import forward, new_session
from activator.repository import Repository
from activator.scaler.backend import ScalerBackend

__all__ = ["FLEET", "build_app"]

logger = logging.getLogger(__name__)

FLEET = web.AppKey("fleet", Fleet)
_VERSION = "0.1.0"
_EXTENSIONS = ["classification", "model_repository", "statistics", "binary_tensor_data"]
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def routes() -> list[web.RouteDef]:
    """THE route table of `thaw up`."""
    m = "/v2/models/{model}"
    mv = "/v2/models/{model}/versions/{version}"
    return [
        web.get("/v2/health/live", live),
        web.get("/v2/health/ready", ready),
        web.get("/v2", server_metadata),
        web.get("/v2/models/stats", all_stats),
        web.get(m, model_metadata),
        web.get(mv, model_metadata),
        web.get(f"{m}/ready", model_ready),
        web.get(f"{mv}/ready", model_ready),
        web.get(f"{m}/config", model_config),
        web.get(f"{mv}/config", model_config),
        web.post(f"{m}/infer", infer),
        web.post(f"{mv}/infer", infer),
        web.get(f"{m}/stats", model_stats),
        web.get(f"{mv}/stats", model_stats),
        web.post("/v2/repository/index", repository_index),
        web.post("/v2/repository/models/{model}/load", load),
        web.post("/v2/repository/models/{model}/unload", unload),
        web.get("/metrics", metrics),
        web.get("/thaw/status", status),
    ]


@web.middleware
async def errors_as_json(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Every error leaves as `{"error": ...}` with its status."""
    try:
        return await handler(request)
    except ActivatorError as exc:
        return web.json_response({"error": exc.message}, status=exc.status, headers=exc.headers())
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.reason
        if exc.status == 404:
            message = RouteNotFound(f"no route for {request.path[:200]}").message
        elif exc.status == 405:
            message = f"method {request.method} not allowed on {request.path[:200]}"
        return web.json_response({"error": message}, status=exc.status)
    except Exception:
        logger.exception("unhandled error on %s %s", request.method, request.path)
        return web.json_response({"error": "internal error in the activator"}, status=500)


def build_app(
    config: ActivatorConfig,
    *,
    repository: Repository | None = None,
    backend: ScalerBackend | None = None,
) -> web.Application:
    """The `thaw up` application; the fleet starts and stops with it (cleanup_ctx)."""
    repo = repository or Repository.scan(config.repository, config.defaults)
    app = web.Application(middlewares=[errors_as_json], client_max_size=config.max_body_bytes)
    app.add_routes(routes())

    async def fleet_ctx(app: web.Application) -> AsyncIterator[None]:
        session = new_session()
        fleet = Fleet(config, repo, Metrics(), session, backend=backend)
        app[FLEET] = fleet
        await fleet.start()
        try:
            yield
        finally:
            await fleet.close()
            await session.close()

    app.cleanup_ctx.append(fleet_ctx)
    return app


# ---- handlers: decode -> fleet / endpoint -> encode ---------------------------------------


async def live(request: web.Request) -> web.Response:
    return web.json_response({"live": True})


async def ready(request: web.Request) -> web.Response:
    return web.json_response({"ready": True})


async def server_metadata(request: web.Request) -> web.Response:
    return web.json_response({"name": "thaw", "version": _VERSION, "extensions": _EXTENSIONS})


def _version(request: web.Request) -> str | None:
    return request.match_info.get("version")


async def model_metadata(request: web.Request) -> web.Response:
    entry = request.app[FLEET].repository.get(request.match_info["model"], _version(request))
    return web.json_response(entry.metadata())


async def model_config(request: web.Request) -> web.Response:
    entry = request.app[FLEET].repository.get(request.match_info["model"], _version(request))
    return web.json_response(entry.config_json())


async def model_ready(request: web.Request) -> web.Response:
    """Ready = servable: at zero replicas too, unless the last wake-up failed."""
    fleet = request.app[FLEET]
    fleet.repository.get(request.match_info["model"], _version(request))
    endpoint = fleet.endpoint(request.match_info["model"])
    if endpoint.ready_count == 0 and endpoint.last_error is not None:
        return web.json_response({"error": endpoint.last_error}, status=503)
    return web.json_response({"ready": True})


async def infer(request: web.Request) -> web.StreamResponse:
    """Hold if no replica slot is free (waking the model), then stream to a replica."""
    fleet = request.app[FLEET]
    name = request.match_info["model"]
    fleet.repository.get(name, _version(request))
    endpoint = fleet.endpoint(name)
    start = time.monotonic()
    code = "500"
    try:
        size = request.content_length or 0
        if size > fleet.config.max_body_bytes:
            raise PayloadTooLarge(
                f"request body of {size} bytes is over the limit of "
                f"{fleet.config.max_body_bytes} bytes"
            )
        async with endpoint.acquire(size) as replica:
            try:
                response = await forward(
                    request, replica.url, fleet.session, timeout_s=fleet.config.request_timeout_s
                )
            except UpstreamFailed as exc:
                endpoint.replica_failed(replica, exc.message)
                if isinstance(exc.partial, web.StreamResponse):
                    return exc.partial
                raise
        code = str(response.status)
        return response
    except ActivatorError as exc:
        code = str(exc.status)
        fleet.metrics.rejections.labels(name, type(exc).__name__).inc()
        raise
    finally:
        fleet.metrics.request_latency.labels(name, code).observe(time.monotonic() - start)


async def _replica_json(request: web.Request, model: str, path: str) -> Any | None:
    """GET `path` from a ready replica of `model` (never wakes it); None when cold."""
    fleet = request.app[FLEET]
    replicas = [r for r in fleet.endpoint(model).replicas if r.can_take()]
    if not replicas:
        return None
    async with fleet.session.get(replicas[0].url + path) as resp:
        return await resp.json() if resp.status == 200 else None


def _zero_stats(name: str, version: str) -> dict[str, Any]:
    zero = {"count": 0, "ns": 0}
    phases = ["success", "fail", "queue", "compute_input", "compute_infer", "compute_output"]
    return {
        "name": name,
        "version": version,
        "last_inference": 0,
        "inference_count": 0,
        "execution_count": 0,
        "inference_stats": {p: dict(zero) for p in phases},
        "batch_stats": [],
    }


async def model_stats(request: web.Request) -> web.Response:
    fleet = request.app[FLEET]
    name, version = request.match_info["model"], _version(request)
    entry = fleet.repository.get(name, version)
    path = request.path
    found = await _replica_json(request, name, path)
    if found is None:
        versions = [version] if version else list(entry.versions)
        found = {"model_stats": [_zero_stats(name, v) for v in versions]}
    return web.json_response(found)


async def all_stats(request: web.Request) -> web.Response:
    fleet = request.app[FLEET]
    stats: list[Any] = []
    for name in fleet.repository.names():
        found = await _replica_json(request, name, f"/v2/models/{name}/stats")
        if found is None:
            versions = fleet.repository.get(name).versions
            found = {"model_stats": [_zero_stats(name, v) for v in versions]}
        stats.extend(found.get("model_stats", []))
    return web.json_response({"model_stats": stats})


async def repository_index(request: web.Request) -> web.Response:
    fleet = request.app[FLEET]
    index = []
    for name in fleet.repository.names():
        endpoint = fleet.endpoint(name)
        failed = endpoint.ready_count == 0 and endpoint.last_error is not None
        for version in fleet.repository.get(name).versions:
            index.append(
                {
                    "name": name,
                    "version": version,
                    "state": "UNAVAILABLE" if failed else "READY",
                    "reason": endpoint.last_error or "" if failed else "",
                }
            )
    return web.json_response(index)


async def load(request: web.Request) -> web.Response:
    """Warm the model now: returns once one replica is ready (or the wake-up failed)."""
    endpoint = request.app[FLEET].endpoint(request.match_info["model"])
    await endpoint.warm()
    return web.json_response({})


async def unload(request: web.Request) -> web.Response:
    """Scale the model to zero now (draining in-flight requests)."""
    endpoint = request.app[FLEET].endpoint(request.match_info["model"])
    await endpoint.scale_to_zero()
    return web.json_response({})


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[FLEET].metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def status(request: web.Request) -> web.Response:
    return web.json_response(request.app[FLEET].status())
