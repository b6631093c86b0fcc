"""SageMaker's multi-model endpoint on the SageMaker port (tritonserver's `/models` routes):
models loaded at run time from the directories SageMaker downloads, listed, invoked, unloaded.

    MultiModelEndpoint(models, body_timeout_s)   the models this endpoint loaded, by name
    endpoint.route(method, name, invoke, headers, content_length)
                                     -> Rewrite (an invocation) | Refusal | Answer (the rest)
    layout(url) -> Layout            which repository to register for a url, and which of its
                                     directories is the model (reads the disk: in a thread)
    out_of_memory(message)           whether an error is one SageMaker answers 507 for

SageMaker's contract, as tritonserver 2.51 keeps it: `POST /models {"model_name": NAME, "url":
DIR}` registers DIR's repository (`layout`) with its model mapped to the name the
`X-Amzn-SageMaker-Target-Model` header gives (else NAME) and loads it: 200, 409 when NAME or
the repository is loaded already, 507 when the load ran out of memory (SageMaker then unloads
others and retries), else 400. `GET /models` lists the ready ones (`{"models": [{"modelName",
"modelUrl"}]}`), `GET /models/NAME` one, `POST /models/NAME/invoke` is an infer request of its
model (404 for a name not loaded; errors 400, or 507), `DELETE /models/NAME` unloads it and the
models it loaded with it, and unregisters its repository (404 when not loaded). Registration
needs explicit model control (`--model-control-mode=explicit`), as Triton's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from aiohttp import web

from runtime.errors import (
    BodyTimeout,
    DeviceOutOfMemory,
    InvalidInput,
    RepositoryConflict,
    RepositoryError,
    ServingError,
)
from runtime.http.cloud_front import Answer, Refusal, Respond, Rewrite
from runtime.models.repository_file import read_regular_file
from thawserver.body_deadline import body_timeout_message
from thawserver.json_response import json_response
from thawwire.names import is_model_name

__all__ = [
    "TARGET_MODEL",
    "Layout",
    "MultiModelEndpoint",
    "invocation_status",
    "layout",
    "out_of_memory",
]

logger = logging.getLogger(__name__)

# The header that names the model SageMaker loads, invokes or unloads (its archive's name);
# without it, the `model_name` of the load (the name in the path).
TARGET_MODEL = "X-Amzn-SageMaker-Target-Model"
# A load request's body is a small JSON object.
MAX_LOAD_BODY = 64 * 1024
# The config whose text says a directory holds an ensemble (Triton's regex).
_ENSEMBLE = re.compile(r'platform:\s*"ensemble"')
_CONFIG = "config.pbtxt"
_MAX_CONFIG_BYTES = 4 * 1024 * 1024
# The words in an error that make SageMaker's answer 507 (tritonserver's list).
_OUT_OF_MEMORY = (
    "CUDA out of memory", "CUDA_OUT_OF_MEMORY", "Out of memory", "Out Of Memory",
    "out of memory", "MemoryError", "OutOfMemory", "OOM", "Dst tensor is not initialized",
    "Src tensor is not initialized", "CNMEM_STATUS_OUT_OF_MEMORY",
    "CUDNN_STATUS_NOT_INITIALIZED", "CUBLAS_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_NOT_INITIALIZED", "Failed to allocate memory", "failed to allocate memory",
    "No space left on device",
)  # fmt: skip


def out_of_memory(message: str) -> bool:
    """Whether `message` says memory ran out (tritonserver's test: any of its words in it)."""
    return any(words in message for words in _OUT_OF_MEMORY)


class Models(Protocol):
    """What the endpoint asks of the models (runtime.models.manager.ModelManager)."""

    async def register_repository(self, root: Path, mapping: Mapping[str, str]) -> None: ...
    async def unregister_repository(self, root: Path) -> None: ...
    async def load(self, name: str) -> float | None: ...
    async def unload(self, name: str, *, unload_dependents: bool = False) -> None: ...
    def model_ready(self, name: str, version: str | None) -> bool: ...


@dataclass(frozen=True)
class Layout:
    """The repository a load registers (SageMaker's `modelUrl`) and its directory that holds
    the model the load names."""

    repository: Path
    subdir: str


def layout(url: str) -> Layout:
    """Where the model of a load's `url` is (blocking): `url` itself when it holds a
    config.pbtxt (its parent is the repository); else the one model directory in it, or the
    one ensemble of several (its steps beside it). RepositoryError says why not."""
    if not url.startswith("/") or "\0" in url:
        raise RepositoryError(f"failed to register '{url[:300]}': 'url' must be an absolute path")
    path = Path(url)
    if path.parent == path:
        raise RepositoryError("failed to register '/': 'url' must be a model's directory")
    try:
        if (path / _CONFIG).exists():
            return Layout(path.parent, path.name)
        subdirs = sorted(e.name for e in os.scandir(path) if e.is_dir(follow_symlinks=False)
                         and not e.name.startswith("."))  # fmt: skip
    except (FileNotFoundError, NotADirectoryError):
        raise RepositoryError(f"failed to register '{url}', repository not found") from None
    except OSError as exc:
        raise RepositoryError(f"failed to register '{url}': {exc.strerror or exc}") from None
    if len(subdirs) == 1:
        return Layout(path, subdirs[0])
    if not subdirs:
        raise RepositoryError(f"failed to register '{url}': it holds no model directory")
    ensembles = [name for name in subdirs if _is_ensemble(path / name / _CONFIG)]
    if len(ensembles) != 1:
        raise RepositoryError(
            f"failed to register '{url}': of its {len(subdirs)} model directories "
            f"{len(ensembles)} are ensembles; several models load as one ensemble and its steps"
        )
    return Layout(path, ensembles[0])


def _is_ensemble(config: Path) -> bool:
    try:
        text = read_regular_file(config, _MAX_CONFIG_BYTES).decode("utf-8", "replace")
    except (OSError, RepositoryError):  # missing, not a regular file, too big: not one
        return False
    return _ENSEMBLE.search(text) is not None


@dataclass(frozen=True)
class _Loaded:
    """A model this endpoint loaded: the name it serves under, and its repository."""

    target: str
    repository: Path


class MultiModelEndpoint:
    """The models SageMaker's multi-model endpoint loaded on one server, by the name SageMaker
    gave each (its `model_name`), and its routes (module docstring)."""

    def __init__(self, models: Models, *, body_timeout_s: float) -> None:
        self._models = models
        self._body_timeout_s = body_timeout_s
        self._loaded: dict[str, _Loaded] = {}

    def route(
        self,
        method: str,
        name: str,
        invoke: bool,
        headers: Mapping[str, str],
        infer: Callable[[str], Rewrite | Refusal],
    ) -> Rewrite | Refusal | Answer:
        """What `METHOD /models[/NAME][/invoke]` is, dispatched as tritonserver's: GET lists
        (or gets NAME, also with `/invoke`), POST with `/invoke` invokes NAME (`infer(model)`:
        the infer request of the model it runs), POST without it loads, DELETE unloads NAME."""
        if method in ("GET", "HEAD"):
            return Answer(self._get(name) if name else self._list)
        if method == "POST" and invoke:
            loaded = self._loaded.get(name)
            if loaded is None:
                return Refusal(404, _not_loaded_reason(name))
            target = headers.get(TARGET_MODEL) or loaded.target
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("Invoking SageMaker TargetModel: %s", target[:300])  # Triton's
            return infer(target)
        if method == "POST":
            return Answer(self._load)
        if method == "DELETE":
            return Answer(self._unload(name))
        return Refusal(400, f"no SageMaker multi-model route is {method[:20]} /models: GET, "
                       "POST or DELETE")  # fmt: skip

    # -- answers ------------------------------------------------------------------------

    async def _list(self, request: web.BaseRequest) -> web.StreamResponse:
        rows = [{"modelName": name, "modelUrl": str(loaded.repository)}
                for name, loaded in list(self._loaded.items())
                if self._ready(loaded.target)]  # fmt: skip
        return json_response({"models": rows})

    def _get(self, name: str) -> Respond:
        async def respond(request: web.BaseRequest) -> web.StreamResponse:
            loaded = self._loaded.get(name)
            if loaded is None:
                return _not_loaded(name)
            return json_response({"modelName": name, "modelUrl": str(loaded.repository)})

        return respond

    def _ready(self, target: str) -> bool:
        try:
            return self._models.model_ready(target, None)
        except ServingError:
            return False

    async def _load(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            name, url = await self._load_body(request)
        except ServingError as exc:  # 400, or 408 for a body that does not arrive
            return json_response({"error": exc.message}, status=exc.status)
        target = request.headers.get(TARGET_MODEL) or name
        if not is_model_name(target):
            return json_response({"error": f"'{target[:300]}' is not a model name"}, status=400)
        logger.info("Loading SageMaker TargetModel: %s", target)  # Triton's words
        try:
            where = await asyncio.to_thread(layout, url)
            await self._models.register_repository(where.repository, {target: where.subdir})
        except RepositoryConflict as exc:  # the repository or the name registered already
            return json_response({"error": exc.message}, status=409)
        except ServingError as exc:
            return json_response({"error": exc.message}, status=400)
        if name in self._loaded:  # from another directory
            await self._unregister(where.repository)
            return json_response({"error": f"model '{name}' is loaded already"}, status=409)
        try:
            await self._models.load(target)
        except ServingError as exc:
            await self._unregister(where.repository)
            # 507 also for Thaw's own refusal of a load whose weights would not fit the GPU.
            memory = isinstance(exc, DeviceOutOfMemory) or out_of_memory(exc.message)
            return json_response({"error": exc.message}, status=507 if memory else 400)
        self._loaded[name] = _Loaded(target, where.repository)
        return web.Response(status=200)

    async def _load_body(self, request: web.BaseRequest) -> tuple[str, str]:
        """The load's `model_name` and `url` (InvalidInput says what is wrong)."""
        if request.content_length is not None and request.content_length > MAX_LOAD_BODY:
            raise InvalidInput(f"a load request's body is at most {MAX_LOAD_BODY} bytes")
        try:
            async with asyncio.timeout(self._body_timeout_s):
                body = await request.content.read(MAX_LOAD_BODY + 1)
                while len(body) <= MAX_LOAD_BODY and not request.content.at_eof():
                    body += await request.content.read(MAX_LOAD_BODY + 1 - len(body))
        except TimeoutError:
            raise BodyTimeout(body_timeout_message(self._body_timeout_s)) from None
        if len(body) > MAX_LOAD_BODY:
            raise InvalidInput(f"a load request's body is at most {MAX_LOAD_BODY} bytes")
        try:
            fields = json.loads(body) if body else {}
        except (ValueError, RecursionError) as exc:
            raise InvalidInput(f"failed to parse the load request's JSON: {exc}") from None
        name = fields.get("model_name") if isinstance(fields, dict) else None
        url = fields.get("url") if isinstance(fields, dict) else None
        if not isinstance(name, str) or not name or not isinstance(url, str) or not url:
            raise InvalidInput(
                'a load request\'s body is {"model_name": NAME, "url": DIRECTORY}, both strings'
            )
        return name, url

    def _unload(self, name: str) -> Respond:
        async def respond(request: web.BaseRequest) -> web.StreamResponse:
            loaded = self._loaded.get(name)
            if loaded is None:
                return _not_loaded(name)
            target = request.headers.get(TARGET_MODEL) or loaded.target
            logger.info("Unloading SageMaker TargetModel: %s", target[:300])  # Triton's words
            try:
                await self._models.unload(target, unload_dependents=True)
            except ServingError as exc:
                return json_response({"error": exc.message}, status=400)
            self._loaded.pop(name, None)
            await self._unregister(loaded.repository)
            return web.Response(status=200)

        return respond

    async def _unregister(self, repository: Path) -> None:
        try:
            await self._models.unregister_repository(repository)
        except ServingError as exc:
            logger.error("Unable to unregister model repository for path: %s: %s", repository,
                         exc.message)  # fmt: skip


def _not_loaded_reason(name: str) -> str:
    return f"model '{name[:300]}' is not loaded by the multi-model endpoint"


def _not_loaded(name: str) -> web.Response:
    return json_response({"error": _not_loaded_reason(name)}, status=404)


def invocation_status(response: web.StreamResponse) -> None:
    """An invocation's error as tritonserver's multi-model endpoint answers it: 507 when it
    says memory ran out (`out_of_memory`), else 400, whatever the v2 port's status."""
    if response.status == 200:
        return
    text = response.text if isinstance(response, web.Response) else None
    response.set_status(507 if text is not None and out_of_memory(text) else 400)
