"""The activator's HTTP surface: one route table, thin handlers, one error middleware."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from activator.config import ActivatorConfig, BoundAddresses
from activator.direct.move_over import MoveOver
from activator.endpoint.sequence_routes import SequenceKey, sequence_key
from activator.errors import (
    ActivatorError,
    BadRequest,
    ControlDisabled,
    PayloadTooLarge,
    RouteNotFound,
    UnknownModel,
)
from activator.fleet.fleet import Fleet
from activator.fleet.log_push import FleetLogSettings
from activator.fleet.reload import RepositorySync
from activator.fleet.replica_push import ReplicaPoster
from activator.fleet.repository import Repository
from activator.fleet.trace_push import FleetTraceSettings
from activator.observe.metrics import Metrics
from activator.scaler.backend import ScalerBackend
from activator.scaler.local_config import LocalConfig
from activator.surfaces import answers
from activator.surfaces.answers import check_ready, index_rows, stats_rows
from activator.surfaces.openai_proxy import OpenAIProxy
from activator.surfaces.proxy import (
    SMALL_BODY,
    forward,
    new_pool,
    new_session,
    read_body,
    to_replica,
)
from activator.surfaces.restricted_apis import http_guard
from activator.surfaces.shm_requests import Rewritten, forward_rewritten, rest_request
from activator.surfaces.status_page import CSP, StatusPage
from activator.surfaces.upstream import UpstreamPool
from thawserver.body_limit import body_cap, too_large_text
from thawserver.connection_guard import ConnectionGuard
from thawserver.json_response import json_response
from thawserver.log_control import LogControl
from thawserver.redaction import Redactor
from thawserver.restricted_protocols import Category
from thawserver.settings_api import SettingsApi
from thawserver.shm_api import RestSharedMemory
from thawserver.shm_registry import SystemSharedMemory
from thawserver.transfer_coding import refuse_unknown_codings
from thawwire import openai_api, server_info
from thawwire.errors import LoadOverrideError, LoadParameterError
from thawwire.internal_calls import HEADER as INTERNAL_HEADER
from thawwire.load_overrides import overrides_from_json, refused, unload_dependents_from_json
from thawwire.model_control import CONTROL_DISABLED
from thawwire.names import canonical_version, is_digits, version_refusal
from thawwire.paths import MODEL, MODEL_VERSION, sent_back
from thawwire.shm_params import names_shared_memory
from thawwire.trace_settings import TraceSettings

__all__ = [
    "CONNECTIONS", "FLEET", "MOVES", "SETTINGS", "SHARED_MEMORY", "build_app", "metrics_app",
]  # fmt: skip

logger = logging.getLogger(__name__)

FLEET = web.AppKey("fleet", Fleet)
UPSTREAM = web.AppKey("upstream", UpstreamPool)  # keep-alive connections for proxying
PAGE = web.AppKey("status_page", StatusPage)  # the /ui/ files, read once at start-up
# The deadlines and connection cap of the listener that serves the app (its first middleware).
CONNECTIONS = web.AppKey("connections", ConnectionGuard)
REDACT = web.AppKey("redact", Redactor)  # what error bodies must not show
# Kept-alive connections served here, moved to a replica once one would take them (the front
# door attaches its rule: activator.direct.move_over).
MOVES = web.AppKey("moves", MoveOver)
# The system shared-memory regions of `thaw up`'s clients: the activator owns them, since
# replicas come and go (thawserver.shm_registry, activator.surfaces.shm_requests).
SHARED_MEMORY = web.AppKey("shared_memory", SystemSharedMemory)
# The logging and trace extensions (thawserver.settings_api): the activator keeps the settings
# and its replicas are told the log ones (activator.fleet.log_push; docs/decisions/0021).
SETTINGS = web.AppKey("settings", SettingsApi)
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def routes(
    guard: Callable[[Category, _Handler], _Handler] = lambda category, handler: handler,
) -> list[web.RouteDef]:
    """THE route table of `thaw up`; each v2 route passed through `guard` with its Triton
    category (activator.surfaces.restricted_apis: `--http-restricted-api`)."""
    m, mv, g = MODEL, MODEL_VERSION, guard
    return [
        # Inference first: routes under one prefix are tried in this order, and it is the hot
        # path (no other route's pattern can match an infer path, so order changes nothing).
        web.post(f"{m}/infer", g(Category.INFERENCE, infer)),
        web.post(f"{mv}/infer", g(Category.INFERENCE, infer)),
        web.post(f"{m}/generate", g(Category.INFERENCE, generate)),
        web.post(f"{mv}/generate", g(Category.INFERENCE, generate)),
        web.post(f"{m}/generate_stream", g(Category.INFERENCE, generate)),
        web.post(f"{mv}/generate_stream", g(Category.INFERENCE, generate)),
        web.get("/v2/health/live", g(Category.HEALTH, live)),
        web.get("/v2/health/ready", g(Category.HEALTH, ready)),
        web.get("/v2", g(Category.METADATA, server_metadata)),
        web.get("/v2/models/stats", g(Category.STATISTICS, all_stats)),
        web.get(m, g(Category.METADATA, model_metadata)),
        web.get(mv, g(Category.METADATA, model_metadata)),
        web.get(f"{m}/ready", g(Category.HEALTH, model_ready)),
        web.get(f"{mv}/ready", g(Category.HEALTH, model_ready)),
        web.get(f"{m}/config", g(Category.MODEL_CONFIG, model_config)),
        web.get(f"{mv}/config", g(Category.MODEL_CONFIG, model_config)),
        web.get(f"{m}/stats", g(Category.STATISTICS, model_stats)),
        web.get(f"{mv}/stats", g(Category.STATISTICS, model_stats)),
        web.post("/v2/repository/index", g(Category.MODEL_REPOSITORY, repository_index)),
        web.post("/v2/repository/models/{model}/load", g(Category.MODEL_REPOSITORY, load)),
        web.post("/v2/repository/models/{model}/unload", g(Category.MODEL_REPOSITORY, unload)),
        web.post("/thaw/models/{model}/scale-to-zero", g(Category.MODEL_REPOSITORY, to_zero)),
        web.get("/metrics", metrics),
        web.get("/thaw/status", status),
        web.get("/thaw/history", history),
        web.get("/ui", ui_root),
        web.get("/ui/", ui_file),
        web.get("/ui/{name}", ui_file),
    ]


@web.middleware
async def errors_as_json(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Every error leaves as `{"error": ...}` with its status, without the repository's or
    the cache's directory in it (thawserver.redaction)."""
    try:
        return await handler(request)
    except ActivatorError as exc:
        message = request.app[REDACT](exc.message)
        return _error(request, message, status=exc.status, headers=exc.headers())
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.reason  # "Not Found", "Method Not Allowed": Triton's, as thaw serve's
        if exc.status == 404 and openai_api.is_openai_path(request.path):
            message = openai_api.no_route_message(request.method, request.path)
        elif exc.status == 413:
            limit = request.app[FLEET].config.max_body_bytes
            message = too_large_text(limit)
        return _error(request, message, status=exc.status)
    except Exception:
        logger.exception("unhandled error on %s %s", request.method, request.path)
        return _error(request, "internal error in the activator", status=500)


def _error(
    request: web.Request, message: str, *, status: int, headers: dict[str, str] | None = None
) -> web.Response:
    """`{"error": message}`; under `/v1`, OpenAI's error document (thawwire.openai_api), as
    `thaw serve` answers there."""
    if openai_api.is_openai_path(request.path):
        doc: dict[str, object] = openai_api.error_body(message, status=status)
    else:
        doc = {"error": message}
    return json_response(doc, status=status, headers=headers)


def build_app(
    config: ActivatorConfig,
    *,
    repository: Repository | None = None,
    backend: ScalerBackend | None = None,
    bound: BoundAddresses | None = None,
    log: LogControl | None = None,
    repository_sync: RepositorySync | None = None,
) -> web.Application:
    """The `thaw up` application; the fleet starts and stops with it (cleanup_ctx). `bound`:
    where this `thaw up` listens (activator.process.serving bound it), for its replicas.
    `log`: the process's installed logging (activator.process.cli); without one (an app built
    in a test) the log settings govern the root logger's level and filters only.
    `repository_sync`: the local copies of S3 repositories, synced before each re-read
    (activator.fleet.reload)."""
    repo = repository or Repository.scan(
        config.repositories, config.defaults, backend_directory=config.backend_directory,
        auto_complete=config.auto_complete_config, namespacing=config.model_namespacing,
        default_max_batch_size=config.default_max_batch_size,
    )  # fmt: skip
    guard = ConnectionGuard(config.connections)
    moves = MoveOver()
    app = web.Application(
        middlewares=[guard.middleware, moves.middleware, refuse_unknown_codings, errors_as_json],
        client_max_size=config.max_body_bytes,
    )
    app[CONNECTIONS] = guard
    app[MOVES] = moves
    moves.install(app)
    app[REDACT] = config.redactor
    restrict = http_guard(config.http_restrictions)
    app.add_routes(routes(restrict))
    OpenAIProxy(FLEET, UPSTREAM, REDACT).install(app, restrict)  # /v1 (docs/openai.md)
    app[SHARED_MEMORY] = shared_memory = SystemSharedMemory()
    RestSharedMemory(shared_memory, body_timeout_s=config.body_deadline_s).add_routes(
        app.router, lambda handler: restrict(Category.SHARED_MEMORY, handler)
    )

    log_target = FleetLogSettings(log if log is not None else LogControl(config.log_settings))
    trace = TraceSettings(config.trace_defaults)
    # Replicas trace only where the operator gave a file: local ones, each to its own file.
    tracing = bool(config.trace_defaults.file) and isinstance(config.scaler, LocalConfig)
    trace_push = FleetTraceSettings(trace) if tracing else None
    app[SETTINGS] = settings = SettingsApi(
        log_target,
        trace,
        # Any model `thaw up` serves, at zero too (Triton: a ready model; waking one to set
        # its trace settings would cost a cold start for nothing).
        lambda name: name in app[FLEET].models,
        body_timeout_s=config.body_deadline_s,
        on_trace_change=trace_push.changed if trace_push is not None else None,
    )
    settings.add_routes(app.router, restrict)

    async def fleet_ctx(app: web.Application) -> AsyncIterator[None]:
        session = new_session(config.internal_calls)
        metrics = Metrics(
            host_gauges=config.metrics_settings.cpu_gauges,
            gpu_gauges=config.metrics_settings.gpu_gauges,
        )
        fleet = Fleet(
            config, repo, metrics, session, backend=backend, bound=bound,
            repository_sync=repository_sync,
        )  # fmt: skip
        app[FLEET] = fleet
        poster = ReplicaPoster(session)
        log_target.attach(poster, fleet.endpoints.values())
        fleet.on_model_added(lambda _name, endpoint: log_target.add(endpoint))
        if trace_push is not None:
            trace_push.attach(poster, fleet.endpoints)
            fleet.on_model_added(trace_push.add)
        app[UPSTREAM] = pool = new_pool()
        try:
            await fleet.start()
        except BaseException:  # e.g. the scaler cannot start: nothing is left open
            await pool.close()
            await session.close()
            raise
        try:
            yield
        finally:
            await fleet.close()
            await poster.close()
            await pool.close()
            await session.close()

    async def page_ctx(app: web.Application) -> AsyncIterator[None]:
        app[PAGE] = await asyncio.to_thread(StatusPage.load)
        yield

    async def shm_ctx(app: web.Application) -> AsyncIterator[None]:
        yield
        shared_memory.close()  # every region's descriptor

    app.cleanup_ctx.append(fleet_ctx)
    app.cleanup_ctx.append(page_ctx)
    app.cleanup_ctx.append(shm_ctx)
    return app


# ---- handlers: decode -> fleet / endpoint -> encode ---------------------------------------


async def live(request: web.Request) -> web.Response:
    # Triton's health answers carry no body
    return web.Response(status=200 if answers.server_live(request.app[FLEET]) else 503)


async def ready(request: web.Request) -> web.Response:
    """The activator can wake models at full speed (answers.server_ready)."""
    return web.Response(status=200 if answers.server_ready(request.app[FLEET]) else 503)


async def server_metadata(request: web.Request) -> web.Response:
    """The same answer as a replica's (`thaw serve`): everything past this door is theirs."""
    return json_response(server_info.server_metadata(request.app[FLEET].config.server_id))


def _version(request: web.Request) -> str | None:
    """The URL's version as Triton reads it (`01` is 1); UnknownModel (404, `thaw serve`'s
    words) when it is not one: Triton routes only decimal versions, so `/versions/x/ready` is
    not found, not "not ready"; digits past int64 are its `std::stol` refusal (400)."""
    version = request.match_info.get("version")
    if version is None:
        return None
    canonical = canonical_version(version)
    if canonical is None:
        if is_digits(version):
            raise BadRequest(version_refusal(version[:40]))
        name = request.match_info["model"][:200]
        raise UnknownModel(f"invalid version {version[:40]!r} for model '{name}'")
    return canonical


async def model_metadata(request: web.Request) -> web.Response:
    fleet, name = request.app[FLEET], request.match_info["model"]
    return json_response(await answers.model_metadata(fleet, name, _version(request)))


async def model_config(request: web.Request) -> web.Response:
    fleet, name = request.app[FLEET], request.match_info["model"]
    return json_response(await answers.model_config(fleet, name, _version(request)))


async def model_ready(request: web.Request) -> web.Response:
    """Ready = servable: at zero replicas too, unless the last wake-up failed."""
    await check_ready(request.app[FLEET], request.match_info["model"], _version(request))
    return web.Response(status=200)


async def infer(request: web.Request) -> web.StreamResponse:
    """Hold if no replica slot is free (waking the model), then stream to a replica."""
    return await _inference(request, tensors=True)


async def generate(request: web.Request) -> web.StreamResponse:
    """Triton's generate extension (`/generate`, and `/generate_stream`'s Server-Sent Events,
    streamed back as the replica writes them): held and woken like an infer request, the
    body forwarded unchanged (a flat JSON object: it never names shared-memory regions)."""
    return await _inference(request, tensors=False)


async def _inference(request: web.Request, *, tensors: bool) -> web.StreamResponse:
    """Forward an inference request to a replica of its model: `tensors`, a v2 infer body
    (whose tensors may be in the client's shared memory)."""
    fleet = request.app[FLEET]
    name = request.match_info["model"]
    await fleet.serving_now(name, _version(request))
    endpoint = fleet.endpoint(name)
    fleet.wake_composing(name)  # an ensemble: its steps' models wake while it does
    with fleet.metrics.counting(name) as count:
        size = request.content_length
        limit, flag = _body_cap(request, fleet)
        if size is not None and size > limit:
            raise PayloadTooLarge(too_large_text(limit, size=size, flag=flag))
        body: bytes | None = None
        if request.body_exists and (size is None or size <= SMALL_BODY or endpoint.stateful):
            # Chunked or small: read it all before holding, so a slow client never occupies
            # a replica slot and a chunked body counts against the cap and the held bytes.
            # A stateful model's request is read to find its sequence (its JSON header).
            body = await read_body(request, limit=limit, timeout_s=fleet.config.body_deadline_s)
            size = len(body)
        sequence: SequenceKey | None = None
        if endpoint.stateful and body is not None:
            sequence = sequence_key(body, request.headers.get("Inference-Header-Content-Length"))
        # Tensors in the client's shared memory: read here, sent as binary data (leased
        # until the answer is written back). Other bodies are never parsed.
        shm = _shm_request(request, body, name) if body and tensors else None

        async def send(url: str) -> web.StreamResponse:
            if shm is not None:
                return await forward_rewritten(
                    request, url, request.app[UPSTREAM], shm,
                    timeout_s=fleet.config.request_timeout_s,
                )  # fmt: skip
            return await forward(
                request,
                url,
                request.app[UPSTREAM],
                timeout_s=fleet.config.request_timeout_s,
                body_timeout_s=fleet.config.body_timeout_s,
                body=body,
            )

        try:
            response = await to_replica(
                endpoint,
                size or 0,
                send,
                model=name,
                replayable=body is not None or not request.body_exists,
                sequence=sequence,
            )
        finally:
            if shm is not None:
                shm.release()
        count.code = response.status
        return response


def _shm_request(request: web.Request, body: bytes, model: str) -> Rewritten | None:
    """The rewritten request when the body names shared-memory regions (a byte search of its
    JSON header first; a compressed body is forwarded as it came)."""
    if "Content-Encoding" in request.headers:
        return None
    length = request.headers.get("Inference-Header-Content-Length")
    header_length = int(length) if length is not None and length.isdigit() else None
    if header_length == 0 or not names_shared_memory(body, header_length):
        return None
    return rest_request(body, header_length, request.app[SHARED_MEMORY], model)


async def model_stats(request: web.Request) -> web.Response:
    rows = await stats_rows(request.app[FLEET], request.match_info["model"], _version(request))
    return json_response({"model_stats": rows})


async def all_stats(request: web.Request) -> web.Response:
    return json_response({"model_stats": await stats_rows(request.app[FLEET], None, None)})


async def repository_index(request: web.Request) -> web.Response:
    """Triton's index: a row per served version; `reason` only when there is one."""
    ready_only = (await _json_object(request)).get("ready", False)
    if not isinstance(ready_only, bool):
        raise BadRequest("Invalid value for 'ready': expected a boolean")  # Triton's text
    return json_response(await index_rows(request.app[FLEET], ready_only=ready_only))


def _body_cap(request: web.Request, fleet: Fleet) -> tuple[int, str]:
    """(the body cap, the flag that raises it) of `request`: a replica's own call (a BLS call,
    an ensemble step, a Python model's `pb_utils.load_model`) carries the deployment's token
    and has the internal cap (thawserver.body_limit.body_cap), a client's the client cap."""
    return body_cap(
        fleet.config.internal_calls,
        request.headers.get(INTERNAL_HEADER),
        public=fleet.config.max_body_bytes,
    )


async def _json_object(request: web.Request, *, limit: int = 1 << 20) -> dict[str, Any]:
    """An optional JSON object body ({} when empty, at most `limit` bytes); BadRequest
    otherwise."""
    raw = await read_body(request, limit=limit, timeout_s=request.app[FLEET].config.body_deadline_s)
    if not raw.strip():
        return {}
    try:
        # A load's body may carry model files: parsed off the event loop when large.
        doc = json.loads(raw) if len(raw) < (1 << 20) else await asyncio.to_thread(json.loads, raw)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadRequest("request body must be a JSON object")
    return doc


def _require_model_control(fleet: Fleet) -> None:
    """Load/unload only with `--model-control-mode explicit` (Triton's rule and message)."""
    if not fleet.config.model_control:
        raise ControlDisabled(CONTROL_DISABLED)


async def load(request: web.Request) -> web.Response:
    """Re-read the model's directory (a model added, or its changed files, or the load's
    `config` / `file:` override: activator.fleet.reload), then warm it: returns once one
    replica is ready (or the wake-up failed). A call a replica sent back (a client's
    handed-off connection) does not wait for the replaced replicas to stop: the replica that
    carries the call may be one of them, and its stop waits for the call."""
    fleet = request.app[FLEET]
    _require_model_control(fleet)
    name = request.match_info["model"]
    # A load may carry the model's files (`file:`): the body limit is the inference one.
    limit, _ = _body_cap(request, fleet)
    doc = await _json_object(request, limit=max(1 << 20, limit))
    params = doc.get("parameters") or {}
    if not isinstance(params, dict):
        raise BadRequest("'parameters' must be a JSON object")
    try:
        override = await asyncio.to_thread(overrides_from_json, params)  # base64 files
    except LoadOverrideError as exc:
        raise BadRequest(refused(name, exc.message)) from None
    await fleet.load(name, override, wait=not sent_back(request.path_qs))
    return web.Response(status=200)


async def unload(request: web.Request) -> web.Response:
    """Scale the model to zero now (draining in-flight requests). A call a replica sent back
    (a client's handed-off connection) returns once the model is refused, its drain running
    on: the replica that carries the call may be one the drain waits for."""
    _require_model_control(request.app[FLEET])
    params = (await _json_object(request)).get("parameters") or {}
    if not isinstance(params, dict):
        raise BadRequest("'parameters' must be a JSON object")
    try:  # as a replica reads it (thawwire.load_overrides)
        dependents = unload_dependents_from_json(params)
    except LoadParameterError as exc:
        raise BadRequest(exc.message) from None
    wait = not sent_back(request.path_qs)
    await request.app[FLEET].unload(
        request.match_info["model"], wait=wait, unload_dependents=dependents
    )
    return web.Response(status=200)


async def to_zero(request: web.Request) -> web.Response:
    """Thaw's own: scale a loaded model to zero now (its replicas drained), and keep it loaded:
    its next request wakes it. Model control's switch and category, as unload (a call a
    replica sent back returns once its replicas are out of rotation, as load's)."""
    fleet = request.app[FLEET]
    _require_model_control(fleet)
    name = request.match_info["model"]
    fleet.serving(name)
    await fleet.endpoint(name).scale_to_zero(wait=not sent_back(request.path_qs))
    return web.Response(status=200)


async def metrics(request: web.Request) -> web.Response:
    """The activator's `thaw_*` series, then its models' replicas' series (Triton's `nv_*`,
    monotonic across replicas coming and going: activator.endpoint.replica_metrics)."""
    fleet = request.app[FLEET]
    body = fleet.metrics.exposition() + (await fleet.replica_metrics()).encode()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def metrics_app(fleet: Fleet) -> web.Application:
    """The metrics port's application (`--metrics-port`, Triton's 8002): `/metrics` alone."""
    guard = ConnectionGuard(fleet.config.connections)
    app = web.Application(
        middlewares=[guard.middleware, refuse_unknown_codings, errors_as_json], client_max_size=1024
    )
    app[CONNECTIONS] = guard
    app[REDACT] = fleet.config.redactor
    app[FLEET] = fleet
    app.add_routes([web.get("/metrics", metrics)])
    return app


async def status(request: web.Request) -> web.Response:
    return json_response(request.app[FLEET].status().to_json())


async def history(request: web.Request) -> web.Response:
    """The status page's plot data: samples after number `since` (default 0: all kept)."""
    raw = request.query.get("since", "0")
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise BadRequest(f"'since' must be a sample number (an integer >= 0), not {raw[:40]!r}")
    return json_response(request.app[FLEET].history_since(int(raw)).to_json())


async def ui_root(request: web.Request) -> web.Response:
    raise web.HTTPFound("/ui/")  # the page's relative asset links need the slash


async def ui_file(request: web.Request) -> web.Response:
    """The status page (`/ui/`) and its assets; nothing else is served from here."""
    name = request.match_info.get("name", "index.html")
    found = request.app[PAGE].get(name)
    if found is None:
        raise RouteNotFound(f"no route for {request.path[:200]!r}")
    body, kind = found
    headers = {"Cache-Control": "no-cache", "Content-Security-Policy": CSP}
    return web.Response(body=body, content_type=kind, charset="utf-8", headers=headers)
