"""Triton's OpenAI frontend's model-control routes on `thaw serve`: load and unload a model.

    POST /v1/models/{model}/load     200 the model's `/v1/models` entry, once it is READY
    POST /v1/models/{model}/unload   200 {"status": "success", "model": ...}, once it is gone

Word for word Triton's frontend (`python/openai/openai_frontend/engine/triton_engine.py`), so a
script written against it keeps working: only in `--model-control-mode explicit` (400 otherwise),
one load or unload at a time (so of five concurrent loads one is 200 and four are 400 "already
loaded"), and errors as its FastAPI answers them, `{"detail": message}` — these two routes are
Triton's extension, not OpenAI's API, whose error document the other `/v1` routes write.

    400  not explicit; already loaded; unload of a model not loaded ("Unknown model: x");
         a name that is not a model name (Triton's InvalidArgument)
    400  the load failed on a wrong config or model file (tritonserver's INVALID_ARG)
    500  the load failed otherwise: no such model in the repository ("failed to poll from
         model repository", Triton's words), or the server's own error
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web

from runtime.config import ModelControlMode, ServeConfig
from runtime.errors import ServingError
from runtime.models.service import ModelService
from thawserver.json_response import json_response
from thawwire import openai_api as api
from thawwire.names import is_model_name

__all__ = ["NOT_EXPLICIT", "POLL_FAILED", "ModelControl"]

NOT_EXPLICIT = "Model load/unload requires --model-control-mode=explicit"
# What tritonserver says of a load whose model is not in the repository.
POLL_FAILED = "failed to poll from model repository"


class _Refused(Exception):
    """A load or unload answered `status` with `detail` (Triton's frontend's HTTPException)."""

    def __init__(self, detail: str, *, status: int) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status


class ModelControl:
    """The two routes over one server's ModelService; `created`: every model's `created`."""

    def __init__(self, config: ServeConfig, manager: ModelService, *, created: int) -> None:
        self._explicit = config.model_control_mode is ModelControlMode.EXPLICIT
        self._manager = manager
        self._created = created
        # Triton's frontend holds one lock over its model table for a whole load or unload:
        # a second call for a model waits, then finds it loaded (or gone) and is refused.
        self._lock = asyncio.Lock()
        self.load = _detail_errors(self._load, config.redactor)
        self.unload = _detail_errors(self._unload, config.redactor)

    async def _loaded(self, name: str) -> bool:
        return any(row["name"] == name for row in await self._manager.index(ready_only=True))

    async def _load(self, request: web.Request) -> web.Response:
        name = self._name(request)
        async with self._lock:
            if await self._loaded(name):
                raise _Refused(f"Model '{name}' is already loaded", status=400)
            if not is_model_name(name):
                raise _Refused(f"Failed to load model '{name}': invalid model name", status=400)
            try:
                await self._manager.load(name)
            except ServingError as exc:
                # Triton's frontend: a model the repository lacks is tritonserver's INTERNAL
                # poll failure (500); a wrong config or model file is INVALID_ARG (400).
                if exc.status == 404:
                    why, status = POLL_FAILED, 500
                else:
                    why, status = exc.message, 400 if exc.status < 500 else 500
                raise _Refused(f"Failed to load model '{name}': {why}", status=status) from exc
        return json_response(api.model_object(name, self._created))

    async def _unload(self, request: web.Request) -> web.Response:
        name = self._name(request)
        async with self._lock:
            if not await self._loaded(name):
                raise _Refused(f"Unknown model: {name}", status=400)
            try:
                await self._manager.unload(name)
            except ServingError as exc:
                raise _Refused(
                    f"Failed to unload model '{name}': {exc.message}", status=500
                ) from exc
        return json_response({"status": "success", "model": name})

    def _name(self, request: web.Request) -> str:
        if not self._explicit:
            raise _Refused(NOT_EXPLICIT, status=400)
        return request.match_info["model"]


_Route = Callable[[web.Request], Coroutine[Any, Any, web.Response]]


def _detail_errors(handler: _Route, redact: Callable[[str], str]) -> _Route:
    """Refusals as Triton's frontend writes them, the server's directories left out (a failed
    load's reason may name them: thawserver.redaction)."""

    async def wrapped(request: web.Request) -> web.Response:
        try:
            return await handler(request)
        except _Refused as exc:
            return json_response({"detail": redact(exc.detail)}, status=exc.status)

    return wrapped
