"""The logging and trace extensions' calls, REST and gRPC, the same for `thaw serve` and `thaw up`:

    GET|POST /v2/logging                          gRPC LogSettings
    GET|POST /v2/trace/setting                    gRPC TraceSetting (model_name "")
    GET|POST /v2/models/{model}/trace/setting     gRPC TraceSetting (model_name set)

Thin handlers over a server's `LogTarget` (what applies log settings: this process's logging,
and for `thaw up` its replicas too) and its `TraceSettings`, with a `ModelCheck` saying which
model names may carry settings. Refusals are Triton's: INVALID_ARG (400, INVALID_ARGUMENT) and,
for a client naming a file, UNSUPPORTED (501, UNIMPLEMENTED). The REST handlers answer their own
errors as `{"error": ...}`, the shape both servers' middlewares write.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

import grpc
from aiohttp import web

from thawserver.body_deadline import BODY_TIMEOUT_STATUS, body_timeout_message
from thawserver.json_response import json_response
from thawserver.restricted_protocols import Category
from thawwire.grpc_service import Method, pb
from thawwire.log_settings import LogSettings, SettingsRefused, update_log_settings
from thawwire.trace_settings import TraceSetting, TraceSettings, parse_trace_update

__all__ = ["LOGGING", "TRACE", "LogTarget", "ModelCheck", "SettingsApi"]

LOGGING = "/v2/logging"
TRACE = "/v2/trace/setting"
_MAX_BODY = 64 * 1024
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Whether a model name may carry trace settings (Triton: the model is ready).
ModelCheck = Callable[[str], bool]


class LogTarget(Protocol):
    """What applies log settings; `apply` may push them further (thaw up: to its replicas)."""

    @property
    def settings(self) -> LogSettings: ...

    def apply(self, settings: LogSettings) -> None: ...


class _Refused(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _unknown_model(model: str) -> SettingsRefused:
    return SettingsRefused(f"Request for unknown model : {model[:200]}")


class SettingsApi:
    """Both extensions over one server's log target, trace settings and model check."""

    def __init__(
        self,
        log: LogTarget,
        trace: TraceSettings,
        known: ModelCheck,
        *,
        body_timeout_s: float,
        on_trace_change: Callable[[], None] | None = None,
    ) -> None:
        """`on_trace_change`: called after a client changed a trace setting (`thaw up` tells
        its replicas)."""
        self._log = log
        self.trace = trace
        self._known = known
        self._body_timeout_s = body_timeout_s
        self._on_trace_change = on_trace_change

    # -- the calls, protocol-free ---------------------------------------------------------

    def update_log(self, update: dict[str, Any]) -> LogSettings:
        settings = update_log_settings(self._log.settings, update)
        self._log.apply(settings)
        return settings

    def trace_setting(self, model: str | None, update: dict[str, Any] | None) -> TraceSetting:
        if model is not None and not self._known(model):
            raise _unknown_model(model)
        if update is None:
            return self.trace.setting(model)
        setting = self.trace.update(model, parse_trace_update(update))
        if self._on_trace_change is not None:
            self._on_trace_change()
        return setting

    # -- REST -----------------------------------------------------------------------------

    def add_routes(
        self,
        router: web.UrlDispatcher,
        guard: Callable[[Category, _Handler], _Handler] = lambda category, handler: handler,
    ) -> None:
        """The extensions' routes, each through `guard` with its restricted-API category
        (`logging`, `trace`); a method other than GET, HEAD or POST is Triton's 405."""
        router.add_route("*", LOGGING, guard(Category.LOGGING, self.rest_logging))
        router.add_route("*", TRACE, guard(Category.TRACE, self.rest_trace))
        router.add_route(
            "*", "/v2/models/{model}/trace/setting", guard(Category.TRACE, self.rest_trace)
        )

    async def rest_logging(self, request: web.Request) -> web.Response:
        try:
            _check_method(request)
            if request.method == "POST":
                settings = self.update_log(await self._body(request))
            else:
                settings = self._log.settings
            return json_response(settings.as_json())
        except _Refused as exc:
            return json_response({"error": exc.message}, exc.status)
        except SettingsRefused as exc:
            return json_response({"error": exc.message}, 501 if exc.unsupported else 400)

    async def rest_trace(self, request: web.Request) -> web.Response:
        model = request.match_info.get("model")
        try:
            _check_method(request)
            update = await self._body(request) if request.method == "POST" else None
            return json_response(self.trace_setting(model, update).as_json())
        except _Refused as exc:
            return json_response({"error": exc.message}, exc.status)
        except SettingsRefused as exc:
            return json_response({"error": exc.message}, 501 if exc.unsupported else 400)

    async def _body(self, request: web.Request) -> dict[str, Any]:
        if request.content_length is not None and request.content_length > _MAX_BODY:
            raise _Refused(f"settings request body is over {_MAX_BODY} bytes", 413)
        body = b""
        try:
            async with asyncio.timeout(self._body_timeout_s):
                while len(body) <= _MAX_BODY:
                    chunk = await request.content.readany()
                    if not chunk:
                        break
                    body += chunk
        except TimeoutError:
            message = body_timeout_message(self._body_timeout_s)
            raise _Refused(message, BODY_TIMEOUT_STATUS) from None
        if len(body) > _MAX_BODY:
            raise _Refused(f"settings request body is over {_MAX_BODY} bytes", 413)
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise _Refused(f"failed to parse the request JSON buffer: {exc}") from None
        if not isinstance(doc, dict):
            raise _Refused("the settings request must be a JSON object")
        return doc

    # -- gRPC -----------------------------------------------------------------------------

    def grpc_methods(self) -> dict[Method, Callable[[Any, Any], Coroutine[Any, Any, Any]]]:
        """LogSettings and TraceSetting: parsed request message and context in, response
        message out; a refusal ends the call with Triton's code."""
        return {
            Method.LOG_SETTINGS: _refusing(self._grpc_log),
            Method.TRACE_SETTING: _refusing(self._grpc_trace),
        }

    def _grpc_log(self, request: Any) -> Any:
        if request.settings:
            if "log_file" in request.settings:
                update: dict[str, Any] = {"log_file": "(any)"}  # refused, whatever its value
            else:
                update = {key: _param(value) for key, value in request.settings.items()}
            settings = self.update_log(update)
        else:
            settings = self._log.settings
        response = pb.LogSettingsResponse()
        for key, value in settings.as_json().items():
            target = response.settings[key]
            if isinstance(value, bool):
                target.bool_param = value
            elif isinstance(value, int):
                target.uint32_param = value
            else:
                target.string_param = value
        return response

    def _grpc_trace(self, request: Any) -> Any:
        model = request.model_name or None
        update = None
        if request.settings:
            update = {key: list(value.value) for key, value in request.settings.items()}
        setting = self.trace_setting(model, update)
        response = pb.TraceSettingResponse()
        for key, value in setting.as_json().items():
            values = value if isinstance(value, list) else [value]
            response.settings[key].value.extend(values)
        return response


def _check_method(request: web.Request) -> None:
    if request.method not in ("GET", "HEAD", "POST"):
        raise _Refused("Method Not Allowed", 405)


# A LogSettingsRequest key sent without a value. Triton's gRPC frontend refuses it as a value
# of the wrong kind ("expect boolean for 'log_info'"), where REST's `null` leaves a setting as
# it is; no setting's type check accepts this object, so it gets those words.
_NO_VALUE = object()


def _param(value: Any) -> Any:
    """A LogSettingsRequest.SettingValue as a JSON-like value (`_NO_VALUE` when none is set)."""
    choice = value.WhichOneof("parameter_choice")
    return _NO_VALUE if choice is None else getattr(value, choice)


def _refusing(fn: Callable[[Any], Any]) -> Callable[[Any, Any], Coroutine[Any, Any, Any]]:
    async def call(request: Any, context: Any) -> Any:
        try:
            return fn(request)
        except SettingsRefused as exc:
            code = grpc.StatusCode.INVALID_ARGUMENT
            if exc.unsupported:
                code = grpc.StatusCode.UNIMPLEMENTED
            await context.abort(code, exc.message)
            raise AssertionError("context.abort returned") from None

    call.__name__ = fn.__name__
    return call
