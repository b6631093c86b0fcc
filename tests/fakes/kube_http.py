"""The fake API server's HTTP surface: the route table of real REST paths
(`/api/v1/namespaces/{ns}/pods/{name}` and friends), authentication, authorization, fault
injection, and the one error middleware that makes every error a `Status` JSON body.

A request is decoded into (verb, resource, namespace, name, subresource), recorded, authorised,
given any armed fault, then handed to `kube_verbs` (or `kube_watch` for watches).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.kube_authz import Authorizer
from tests.fakes.kube_discovery import discovery_routes
from tests.fakes.kube_errors import (
    StatusError,
    bad_request,
    forbidden,
    method_not_allowed,
)
from tests.fakes.kube_faults import FaultAction, Faults
from tests.fakes.kube_resources import SELF_SUBJECT_ACCESS_REVIEWS, ResourceType, scale_of
from tests.fakes.kube_store import Store
from tests.fakes.kube_verbs import (
    bind_pod,
    create_object,
    delete_collection,
    delete_object,
    list_objects,
    patcher,
    write_scale,
)
from tests.fakes.kube_watch import WatchHub, WatchOptions, parse_bool, serve_watch

__all__ = ["API_STATE", "ApiState", "RecordedRequest", "build_app"]

logger = logging.getLogger(__name__)


@dataclass
class RecordedRequest:
    """One request as the server understood it, for tests that assert what a client sent;
    `status` is the HTTP status it was answered with (None while unanswered, or dropped);
    `at` is when it arrived (`time.monotonic()`, for a benchmark's timeline)."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    verb: str
    resource: str
    namespace: str | None
    name: str | None
    body: Any
    status: int | None = None
    at: float = field(default_factory=time.monotonic)


@dataclass
class ApiState:
    """Everything the handlers share; lives in the app under `API_STATE`."""

    store: Store
    types: dict[str, ResourceType]
    faults: Faults
    authorizer: Authorizer
    watch_options: WatchOptions
    token: str | None
    hub: WatchHub = field(default_factory=WatchHub)
    requests: list[RecordedRequest] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


API_STATE = web.AppKey("api_state", ApiState)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _status_response(error: StatusError) -> web.Response:
    return web.json_response(error.status(), status=error.code, headers=error.headers)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except StatusError as exc:
        return _status_response(exc)
    except web.HTTPMethodNotAllowed as exc:
        return _status_response(method_not_allowed(exc.method))
    except web.HTTPNotFound:
        return _status_response(
            StatusError(404, "NotFound", "the server could not find the requested resource")
        )
    except web.HTTPException as exc:  # aiohttp's own answers (e.g. 413 on a huge body)
        reason = "RequestEntityTooLarge" if exc.status == 413 else "BadRequest"
        return _status_response(StatusError(exc.status, reason, exc.reason))
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception as exc:  # a bug in the fake: answer as the real server would, and record it
        logger.exception("fake API server bug on %s %s", request.method, request.path)
        request.app[API_STATE].internal_errors.append(f"{request.method} {request.path}: {exc!r}")
        return _status_response(StatusError(500, "InternalError", f"fake API server bug: {exc!r}"))


@web.middleware
async def _authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    token = request.app[API_STATE].token
    public = request.path.rstrip("/") in ("/version", "/healthz", "/livez", "/readyz")
    if token and not public and request.headers.get("Authorization") != f"Bearer {token}":
        raise StatusError(401, "Unauthorized", "Unauthorized")
    return await handler(request)


# --- discovery -------------------------------------------------------------------------------


# --- resources -------------------------------------------------------------------------------


def _routes(types: Iterable[ResourceType]) -> list[web.RouteDef]:
    """The route table: discovery, then four paths per resource type."""
    table = discovery_routes(types)
    for rtype in types:
        base, plural = rtype.base_path, rtype.plural
        handler = functools.partial(_handle, rtype)
        if rtype.namespaced:
            table.append(web.route("*", f"{base}/{plural}", handler))
            base = f"{base}/namespaces/{{namespace}}"
        table += [
            web.route("*", f"{base}/{plural}", handler),
            web.route("*", f"{base}/{plural}/{{name}}", handler),
            web.route("*", f"{base}/{plural}/{{name}}/{{subresource}}", handler),
        ]
    return table


def _verb(method: str, *, named: bool, watch: bool, sub: str | None) -> str:
    if sub == "binding":
        if method != "POST":
            raise method_not_allowed(method)
        return "create"
    if method == "GET":
        return "get" if named else ("watch" if watch else "list")
    if method == "POST" and not named:
        return "create"
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    if method in ("PUT", "PATCH") and named:
        return "update" if method == "PUT" else "patch"
    raise method_not_allowed(method)


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise bad_request(f"error decoding request body: {exc}") from None


async def _handle(rtype: ResourceType, request: web.Request) -> web.StreamResponse:
    state = request.app[API_STATE]
    info = request.match_info
    namespace, name, sub = info.get("namespace"), info.get("name"), info.get("subresource")
    watch = parse_bool(request.query.get("watch"))
    verb = _verb(request.method, named=name is not None, watch=watch, sub=sub)
    if sub is not None and sub not in rtype.subresources:
        raise StatusError(404, "NotFound", "the server could not find the requested resource")
    if verb not in rtype.verbs or (
        rtype.namespaced and namespace is None and verb not in ("list", "watch")
    ):
        raise method_not_allowed(request.method)
    resource = f"{rtype.plural}/{sub}" if sub else rtype.plural
    body = await _body(request)
    recorded = RecordedRequest(
        request.method,
        request.path,
        dict(request.query),
        request.content_type,
        verb,
        resource,
        namespace,
        name,
        body,
    )
    state.requests.append(recorded)
    try:
        response = await _answer(state, rtype, verb, request, namespace, name, sub, body, resource)
    except StatusError as exc:
        recorded.status = exc.code
        raise
    recorded.status = response.status
    return response


async def _answer(
    state: ApiState,
    rtype: ResourceType,
    verb: str,
    request: web.Request,
    namespace: str | None,
    name: str | None,
    sub: str | None,
    body: Any,
    resource: str,
) -> web.StreamResponse:
    # Any authenticated user may ask what it may do (the real system:basic-user role).
    reviewing = rtype is SELF_SUBJECT_ACCESS_REVIEWS
    if not reviewing and not state.authorizer.allows(verb, rtype.group, resource, namespace):
        raise forbidden(state.authorizer.user, verb, resource, rtype.group, namespace)
    await _apply_fault(request, state, verb, resource)
    if verb == "watch":
        return await serve_watch(
            request,
            store=state.store,
            hub=state.hub,
            options=state.watch_options,
            rtype=rtype,
            namespace=namespace,
        )
    return await _dispatch(state, rtype, verb, request, namespace, name, sub, body)


async def _apply_fault(request: web.Request, state: ApiState, verb: str, resource: str) -> None:
    fault = state.faults.take(verb, resource)
    if fault is None:
        return
    if fault.action is FaultAction.DELAY:
        await asyncio.sleep(fault.delay_s)
    elif fault.action is FaultAction.DROP:
        if request.transport is not None:
            request.transport.abort()
        raise asyncio.CancelledError  # nothing can be answered on an aborted connection
    else:
        details = {"retryAfterSeconds": fault.retry_after_s} if fault.retry_after_s else None
        headers = {"Retry-After": str(fault.retry_after_s)} if fault.retry_after_s else None
        raise StatusError(fault.code, fault.reason, fault.message, details, headers=headers)


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.json_response(obj, status=status)


async def _dispatch(
    state: ApiState,
    rtype: ResourceType,
    verb: str,
    request: web.Request,
    namespace: str | None,
    name: str | None,
    sub: str | None,
    body: Any,
) -> web.Response:
    store, query = state.store, request.query
    if verb == "list":
        return _json(list_objects(store, rtype, namespace, query))
    if verb == "create" and sub == "binding":
        return _json(bind_pod(store, namespace, str(name), body), 201)
    if verb == "create":
        return _json(create_object(store, state.authorizer, rtype, namespace, body), 201)
    if verb == "deletecollection" or name is None:
        return _json(delete_collection(store, rtype, namespace, query))
    if verb == "get":
        obj = store.get(rtype, namespace, name)
        return _json(scale_of(obj) if sub == "scale" else obj)
    if verb == "delete":
        return _json(*delete_object(store, state.types, rtype, namespace, name, query, body))
    if not isinstance(body, (dict, list)):
        raise bad_request("the request body must be a JSON object")
    if sub == "scale":
        return _json(write_scale(store, rtype, namespace, name, verb, request.content_type, body))
    if verb == "update":
        return _json(store.update(rtype, namespace, name, lambda _: body, subresource=sub))
    patch = patcher(rtype, request.content_type, body)
    return _json(store.update(rtype, namespace, name, patch, subresource=sub))


def build_app(state: ApiState) -> web.Application:
    app = web.Application(middlewares=[_errors, _authenticate], client_max_size=3 * 1024 * 1024)
    app[API_STATE] = state
    app.add_routes(_routes(list(state.types.values())))
    return app
