"""The OpenAI-compatible routes at `thaw up`: the model list from the repository, and each
completion, chat or embeddings request held, woken and forwarded like an infer request.

    GET  /v1/models, /v1/models/{model}   answered here, from the repository: nothing wakes
                                          (with --lora-separator, each model's adapters too)
    POST /v1/completions | /v1/chat/completions | /v1/embeddings
         body read whole (small JSON), only its "model" looked at: `<model><sep><lora>`
         routes to <model>, a LoRA it does not offer refused here (thawwire.openai_lora)
         ─▶ the model's endpoint: hold, wake from zero, take a replica slot
         ─▶ forwarded unchanged to the replica's own route; its answer (JSON, or Server-Sent
            Events token by token) streamed back as it comes
         ─▶ thaw_time_to_first_token_seconds{model, cold}: arrival -> the answer's head

The replica (runtime.openai) does every translation; errors here and there have one shape
(thawwire.openai_api).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from activator.errors import ActivatorError, BadRequest, UnknownModel
from activator.fleet.fleet import Fleet
from activator.fleet.repository import ModelEntry
from activator.surfaces.proxy import forward, read_body, to_replica
from activator.surfaces.upstream import UpstreamPool
from thawserver.json_response import json_response
from thawserver.redaction import Redactor
from thawserver.restricted_protocols import Category
from thawwire import openai_api as api
from thawwire.openai_lora import lora_model_id, read_lora_names, split_lora, unknown_lora_message

__all__ = ["OpenAIProxy"]

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Repository names are short; a longer "model" is refused before any lookup.
_MAX_NAME = 512
# Request key: (model, cold on arrival, arrival time) of a request being forwarded.
_ARRIVED = "thaw.openai_arrived"


class OpenAIProxy:
    """The `/v1` routes of one `thaw up` app, reading its fleet, upstream pool and redactor
    through the app's keys (activator.surfaces.app owns them)."""

    def __init__(
        self,
        fleet: web.AppKey[Fleet],
        upstream: web.AppKey[UpstreamPool],
        redact: web.AppKey[Redactor],
    ) -> None:
        self._fleet = fleet
        self._upstream = upstream
        self._redact = redact
        self._created = int(time.time())  # every model's `created`: when this app was built

    def install(
        self, app: web.Application, guard: Callable[[Category, _Handler], _Handler]
    ) -> None:
        """Add the routes to `app`, and the time to first token to its responses' start."""
        app.add_routes(self.routes(guard))
        app.on_response_prepare.append(self._first_bytes)

    def routes(self, guard: Callable[[Category, _Handler], _Handler]) -> list[web.RouteDef]:
        """THE `/v1` routes (each passed through `guard`: `--http-restricted-api`)."""
        generate = guard(Category.INFERENCE, self._errors(self.generate))
        return [
            *(web.post(path, generate) for path in api.GENERATION_PATHS),
            web.get(api.MODELS, guard(Category.MODEL_REPOSITORY, self._errors(self.models))),
            web.get(api.MODEL, guard(Category.MODEL_REPOSITORY, self._errors(self.model))),
        ]

    def _errors(self, handler: _Handler) -> _Handler:
        async def wrapped(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)
            except ActivatorError as exc:
                message = request.app[self._redact](exc.message)
                code = "model_not_found" if isinstance(exc, UnknownModel) else None
                param = exc.param if isinstance(exc, _BadField) else None
                doc = api.error_body(message, status=exc.status, param=param, code=code)
                return json_response(doc, status=exc.status, headers=exc.headers())

        return wrapped

    def _names(self, fleet: Fleet) -> list[str]:
        """Every model of the repository (Triton's frontend's rule; those whose config could
        not be used too: a request to one says why); in explicit mode the loaded ones only,
        as Triton's frontend and `thaw serve` list them."""
        repository, states = fleet.repository, fleet.load_states
        return sorted(n for n in {*repository.names(), *repository.unavailable} if states.loaded(n))

    async def _ids(self, fleet: Fleet) -> list[str]:
        """What `/v1/models` lists: each model, then each LoRA adapter it offers (the
        fleet's load state learned afresh first when one is not loaded here)."""
        separator = fleet.config.lora_separator
        await fleet.refresh_load_state(*fleet.repository.names())
        names = self._names(fleet)
        if separator is None:
            return names
        entries = [fleet.repository.get(name) for name in fleet.repository.names()]
        loras = await asyncio.to_thread(lambda: {e.name: _lora_names(e) for e in entries})
        ids: list[str] = []
        for name in names:
            ids += [name, *(lora_model_id(name, lora, separator) for lora in loras.get(name, ()))]
        return ids

    async def models(self, request: web.Request) -> web.Response:
        fleet = request.app[self._fleet]
        data = [api.model_object(name, self._created) for name in await self._ids(fleet)]
        return json_response({"object": "list", "data": data})

    async def model(self, request: web.Request) -> web.Response:
        fleet, name = request.app[self._fleet], request.match_info["model"]
        if name not in await self._ids(fleet):
            raise UnknownModel(f"The model '{name[:200]}' does not exist")
        return json_response(api.model_object(name, self._created))

    async def generate(self, request: web.Request) -> web.StreamResponse:
        """Hold until a replica slot of the body's model is free (waking it), then forward."""
        fleet = request.app[self._fleet]
        config = fleet.config
        body = await read_body(
            request, limit=config.max_body_bytes, timeout_s=config.body_deadline_s
        )
        asked = _model_of(body)
        name, lora = split_lora(asked, config.lora_separator)
        # 404 (OpenAI's model_not_found) or 503 before holding
        entry = await fleet.serving_now(name)
        if lora is not None and lora not in await asyncio.to_thread(_lora_names, entry):
            # The replica's refusal, document and all (`param`), without waking it.
            doc = api.error_body(unknown_lora_message(lora, asked), status=400, param="model")
            return json_response(doc, status=400)
        endpoint = fleet.endpoint(name)
        fleet.wake_composing(name)
        # The replica starts its answer at the first token (runtime.openai streams only then):
        # its head, passed on here, is the time to first token (_first_bytes).
        request[_ARRIVED] = (name, endpoint.ready_count == 0, time.monotonic())
        with fleet.metrics.counting(name) as count:

            async def send(url: str) -> web.StreamResponse:
                return await forward(
                    request,
                    url,
                    request.app[self._upstream],
                    timeout_s=config.request_timeout_s,
                    body_timeout_s=config.body_timeout_s,
                    body=body,
                )

            response = await to_replica(endpoint, len(body), send, model=name, replayable=True)
            count.code = response.status
            return response

    async def _first_bytes(self, request: web.Request, response: web.StreamResponse) -> None:
        """on_response_prepare: a forwarded OpenAI answer starts (status 200 only: a refusal
        is no token)."""
        arrived = request.get(_ARRIVED)
        if arrived is None or response.status != 200:
            return
        name, cold, start = arrived
        request.app[self._fleet].endpoint(name).first_token(time.monotonic() - start, cold=cold)


def _lora_names(entry: ModelEntry) -> tuple[str, ...]:
    """The LoRA adapters `entry`'s newest served version offers (blocking: reads files). A
    model is vLLM style by its config's backend or a declared `sampling_parameters` input, as
    the replica reads it (runtime.openai.triton_mapping)."""
    if not entry.versions:
        return ()
    config = entry.config
    vllm = config.backend == "vllm" or any(i.name == "sampling_parameters" for i in config.input)
    return read_lora_names(entry.directory / entry.versions[-1], vllm=vllm)


class _BadField(BadRequest):
    """A body refused here, naming its field (`param`) as the replica's refusal would."""

    def __init__(self, message: str, *, param: str) -> None:
        super().__init__(message)
        self.param = param


def _model_of(body: bytes) -> str:
    """The `model` an OpenAI request body names; else the refusal `thaw serve` answers: 400
    for a body without one, 404 for a name no model can have (too long)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"request body is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(doc, dict):
        raise BadRequest("request body must be a JSON object")
    name = doc.get("model")
    if not isinstance(name, str) or not name:
        raise _BadField("'model' must be a non-empty string", param="model")
    if len(name) > _MAX_NAME:
        raise UnknownModel(f"The model '{name[:200]}' does not exist")
    return name
