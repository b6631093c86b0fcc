"""The OpenAI-compatible routes of `thaw serve`: THE `/v1` route table and thin handlers.

    GET  /health/ready          200 while the server is ready (the v2 route's rule)
    GET  /v1/models             every model loaded and READY (Triton's frontend's rule), and
                                with --lora-separator each `<model><sep><lora>` it offers (lora)
    GET  /v1/models/{model}
    POST /v1/models/{model}/load, /unload    Triton's frontend's model control (model_control)
    POST /v1/completions        ─▶ schema ─▶ Generation (triton_mapping, the ModelService)
    POST /v1/chat/completions      ─▶ one JSON answer, or Server-Sent Events then [DONE]
                                   (with tools: each choice through tool_calls)
    POST /v1/embeddings         ─▶ one request per input string

Every refusal is OpenAI's error shape (runtime.openai.errors), with the runtime's status.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from runtime.config import ServeConfig
from runtime.errors import ServingError
from runtime.models.service import ModelService
from runtime.openai import answers
from runtime.openai.chat_template import ChatTemplates
from runtime.openai.errors import OpenAIError, from_serving
from runtime.openai.generation import Delta, End, Generation
from runtime.openai.logprobs import TokenLogprob
from runtime.openai.lora import LoraAdapters, LoraRequest
from runtime.openai.model_control import ModelControl
from runtime.openai.schema import (
    GenerationRequest,
    parse_body,
    parse_chat,
    parse_completion,
    parse_embedding,
)
from runtime.openai.tool_calls import ToolStream, whole_message
from runtime.openai.tool_schema import ToolMode
from runtime.openai.triton_mapping import ModelFace, embedding_of, embedding_request, token_counts
from thawserver.body_limit import too_large_text
from thawserver.json_response import json_response
from thawserver.restricted_protocols import Category
from thawwire import openai_api as api
from thawwire.names import is_model_name

__all__ = ["OpenAIHandlers", "add_routes"]

logger = logging.getLogger(__name__)

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_SSE = "text/event-stream; charset=utf-8"
# How many of one embeddings request's inputs are in the model's queue at once.
_EMBEDDING_CONCURRENCY = 16


def add_routes(
    router: web.UrlDispatcher,
    h: OpenAIHandlers,
    guard: Callable[[Category, _Handler], _Handler],
    *,
    ready: _Handler,
) -> None:
    """THE route table of the OpenAI surface (`guard`: `--http-restricted-api`; `ready`: the
    server's readiness, which Triton's frontend serves at `/health/ready`)."""
    router.add_get(api.HEALTH_READY, guard(Category.HEALTH, ready))
    router.add_post(api.CHAT_COMPLETIONS, guard(Category.INFERENCE, h.chat_completions))
    router.add_post(api.COMPLETIONS, guard(Category.INFERENCE, h.completions))
    router.add_post(api.EMBEDDINGS, guard(Category.INFERENCE, h.embeddings))
    router.add_get(api.MODELS, guard(Category.MODEL_REPOSITORY, h.models))
    router.add_get(api.MODEL, guard(Category.MODEL_REPOSITORY, h.model))
    router.add_post(api.MODEL_LOAD, guard(Category.MODEL_REPOSITORY, h.control.load))
    router.add_post(api.MODEL_UNLOAD, guard(Category.MODEL_REPOSITORY, h.control.unload))


def _openai_errors(handler: _Handler, redact: Callable[[str], str]) -> _Handler:
    """Refusals leave in OpenAI's shape (the runtime's middleware would write its own), the
    server's directories left out as in every error body (`redact`)."""

    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except OpenAIError as exc:
            return json_response(exc.body(), status=exc.status)
        except ServingError as exc:
            error = from_serving(exc, redact)
            return json_response(error.body(), status=error.status)

    return wrapped


class OpenAIHandlers:
    """The `/v1` endpoints over one server's ModelService."""

    def __init__(self, config: ServeConfig, manager: ModelService) -> None:
        self._config = config
        self._manager = manager
        self._templates = ChatTemplates(config.repositories)
        self._loras = LoraAdapters(config.repositories, config.lora_separator)
        self._created = int(time.time())  # every model's `created`: when this server started
        self.completions = _openai_errors(self._completions, config.redactor)
        self.chat_completions = _openai_errors(self._chat_completions, config.redactor)
        self.embeddings = _openai_errors(self._embeddings, config.redactor)
        self.models = _openai_errors(self._models, config.redactor)
        self.model = _openai_errors(self._model, config.redactor)
        self.control = ModelControl(config, manager, created=self._created)

    # -- models ----------------------------------------------------------------------------

    async def _names(self) -> list[str]:
        """The models loaded and READY: Triton's frontend lists no other (in explicit mode,
        what --load-model and the load route brought up)."""
        return sorted({row["name"] for row in await self._manager.index(ready_only=True)})

    async def _ids(self) -> list[str]:
        """What `/v1/models` lists: each ready model, then each LoRA adapter it offers."""
        names = await self._names()
        if self._loras.separator is None:
            return names
        ids: list[str] = []
        for name in names:
            try:
                face = self._face_of(name)
            except ServingError:
                continue  # unloaded since it was listed
            ids += await self._loras.ids(name, face.version, vllm=face.vllm)
        return ids

    async def _models(self, request: web.Request) -> web.Response:
        data = [api.model_object(name, self._created) for name in await self._ids()]
        return json_response({"object": "list", "data": data})

    async def _model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name not in await self._ids():
            raise OpenAIError(
                f"The model '{name[:200]}' does not exist", status=404, code="model_not_found"
            )
        return json_response(api.model_object(name, self._created))

    # -- generation ------------------------------------------------------------------------

    async def _body(self, request: web.Request) -> dict[str, Any]:
        if request.headers.get("Content-Encoding", "identity") != "identity":
            raise OpenAIError("a compressed request body is not supported here", status=415)
        try:
            async with asyncio.timeout(self._config.body_timeout_s):
                raw = await request.read()
        except TimeoutError:
            raise OpenAIError("request body did not arrive in time", status=408) from None
        except web.HTTPRequestEntityTooLarge:
            limit = self._config.max_body_bytes
            raise OpenAIError(too_large_text(limit), status=413) from None
        return parse_body(raw)

    def _face_of(self, name: str) -> ModelFace:
        if not is_model_name(name):
            raise OpenAIError(
                f"The model '{name[:200]}' does not exist", status=404, code="model_not_found"
            )
        return ModelFace.of(
            name, self._manager.metadata(name, None), self._manager.config(name, None)
        )

    async def _face(self, asked: str) -> tuple[ModelFace, LoraRequest | None]:
        """The model a generation request's `model` names, and what it is sent for the LoRA
        adapter it selects (400 in Triton's frontend's words when the model offers none such)."""
        selection = self._loras.split(asked)
        face = self._face_of(selection.model)
        lora = await self._loras.request(selection, asked, face.version, vllm=face.vllm)
        return face, lora

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_completion(await self._body(request)))

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_chat(await self._body(request)))

    async def _generate(self, request: web.Request, asked: GenerationRequest) -> web.StreamResponse:
        if asked.sampling.max_tokens is None:  # `--default-max-tokens`, as Triton's frontend
            limit = self._config.default_max_tokens
            sampling = dataclasses.replace(asked.sampling, max_tokens=limit)
            asked = dataclasses.replace(asked, sampling=sampling)
        face, lora = await self._face(asked.model)
        prompts = asked.prompts
        if asked.is_chat:
            asked.tools.check_parser(self._config.tool_call_parser)
            prompt = await self._templates.prompt(
                face.name, face.version, asked.messages, asked.tools.tools
            )
            prompts = (prompt,)
        generation = Generation(self._manager, face, asked, prompts, lora=lora)
        answer = answers.Answer.new(asked.model, int(time.time()), chat=asked.is_chat)
        if asked.stream:
            return await self._stream(request, generation, answer, asked)
        texts = [""] * generation.choices
        finish = ["stop"] * generation.choices
        # Each choice's logprobs: where its first token starts, and its tokens so far.
        logprobs: list[tuple[int, tuple[TokenLogprob, ...]] | None] = [None] * generation.choices
        events = generation.events()
        try:
            async for event in events:
                if isinstance(event, Delta):
                    texts[event.index] += event.text
                    if event.logprobs is not None:
                        start, tokens = logprobs[event.index] or (event.offset, ())
                        logprobs[event.index] = (start, tokens + event.logprobs)
                else:
                    finish[event.index] = event.finish_reason
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        usage = generation.usage.to_json()
        if not asked.is_chat or asked.tools.mode is ToolMode.PLAIN:
            return json_response(answer.whole(list(texts), finish, usage, logprobs))
        messages = [whole_message(t, asked.tools, self._config.tool_call_parser) for t in texts]
        contents = [m.content for m in messages]
        calls = [m.tool_calls for m in messages]
        finish = [m.finish_reason or f for m, f in zip(messages, finish, strict=True)]
        return json_response(answer.whole(contents, finish, usage, logprobs, calls))

    async def _stream(
        self,
        request: web.Request,
        generation: Generation,
        answer: answers.Answer,
        asked: GenerationRequest,
    ) -> web.StreamResponse:
        """Each text delta as a chunk, as it comes; the headers wait for the first one, so a
        refusal before the model answered is a plain JSON error. Once streaming, an error is
        an event `{"error": {...}}`, then `[DONE]`."""
        response: web.StreamResponse | None = None
        chunks = _Chunks(answer, asked, generation.choices, self._config)
        events = generation.events()
        try:
            async for event in events:
                if response is None:
                    response = await self._start(request, generation, answer, chunks.usage)
                for chunk in chunks.of(event):
                    await response.write(answers.sse(chunk))
                if chunks.all_cut:
                    break  # every choice was cut: leaving ends the model's requests
            if response is None:
                response = await self._start(request, generation, answer, chunks.usage)
            if chunks.usage:
                await response.write(answers.sse(answer.usage_chunk(generation.usage.to_json())))
        except (OpenAIError, ServingError) as exc:
            if response is None:
                raise
            redact = self._config.redactor
            error = exc if isinstance(exc, OpenAIError) else from_serving(exc, redact)
            await response.write(answers.sse(error.body()))
        except ConnectionResetError:
            return response or web.Response(status=499)
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        await response.write(answers.DONE)
        await response.write_eof()
        return response

    async def _start(
        self,
        request: web.Request,
        generation: Generation,
        answer: answers.Answer,
        include_usage: bool,
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        response.headers["Content-Type"] = _SSE
        response.headers["Cache-Control"] = "no-cache"
        await response.prepare(request)
        if answer.chat:  # each choice's first chunk names the role
            for index in range(generation.choices):
                chunk = answer.chunk(index, "", role=True, usage=include_usage)
                await response.write(answers.sse(chunk))
        return response

    # -- embeddings ------------------------------------------------------------------------

    async def _embeddings(self, request: web.Request) -> web.Response:
        asked = parse_embedding(await self._body(request))
        face = self._face_of(asked.model)
        infers = [
            embedding_request(face, text, dimensions=asked.dimensions) for text in asked.inputs
        ]
        gate = asyncio.Semaphore(_EMBEDDING_CONCURRENCY)

        async def one(index: int) -> tuple[list[float], int]:
            async with gate:
                last = None
                stream = self._manager.stream(infers[index])
                try:
                    async for response in stream:
                        if not response.flag_only:
                            last = response.checked()
                finally:
                    await stream.aclose()  # type: ignore[attr-defined]
            if last is None:
                raise OpenAIError(f"model '{face.name}' answered no embedding", status=500)
            counts = token_counts(last)
            return embedding_of(last), counts[0] if counts else 0

        tasks = [asyncio.ensure_future(one(i)) for i in range(len(infers))]
        try:
            results = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:  # one failed (or the client left): the rest are not wanted
                task.cancel()
            raise
        vectors = [vector for vector, _ in results]
        tokens = sum(count for _, count in results)
        doc = answers.embeddings(asked.model, vectors, as_base64=asked.base64, prompt_tokens=tokens)
        return json_response(doc)


class _Chunks:
    """A streamed request's events as its chunks: text deltas as content, or through each
    choice's ToolStream (runtime.openai.tool_calls) when tools are in play; a choice whose
    parsed text passes the limit is cut there, with finish_reason "length"."""

    def __init__(
        self, answer: answers.Answer, asked: GenerationRequest, choices: int, config: ServeConfig
    ) -> None:
        self._answer = answer
        self.usage = asked.include_usage
        self._choices = choices
        self._cut: set[int] = set()
        self._ended: set[int] = set()
        self._limit = config.max_tool_call_parse_bytes
        tools_in_play = asked.is_chat and asked.tools.mode is not ToolMode.PLAIN
        self._tools = (
            [
                ToolStream(asked.tools, config.tool_call_parser, max_parse_bytes=self._limit)
                for _ in range(choices)
            ]
            if tools_in_play
            else None
        )

    @property
    def all_cut(self) -> bool:
        return bool(self._cut) and len(self._cut | self._ended) == self._choices

    def of(self, event: Delta | End) -> list[dict[str, Any]]:
        index, answer, usage = event.index, self._answer, self.usage
        if index in self._cut:
            return []
        tools = self._tools[index] if self._tools is not None else None
        if isinstance(event, End):
            self._ended.add(index)
            reason, held = event.finish_reason, None
            if tools is not None:
                piece, reason = tools.finish(reason)
                held = piece.content or None
            text = held if answer.chat else ""
            return [answer.chunk(index, text, finish_reason=reason, usage=usage)]
        lp, offset = event.logprobs, event.offset
        if tools is None:
            return [answer.chunk(index, event.text, usage=usage, logprobs=lp, offset=offset)]
        if tools.over_limit(event.text):
            self._cut.add(index)
            logger.warning(
                "model=%s streamed tool-call text passed %d bytes: the answer is cut",
                answer.model, self._limit,
            )  # fmt: skip
            return [answer.chunk(index, "", finish_reason="length", usage=usage)]
        piece = tools.feed(event.text)
        if not piece and lp is None:
            return []
        content = piece.content or None
        calls = piece.tool_calls or None
        return [
            answer.chunk(index, content, usage=usage, logprobs=lp, offset=offset, tool_calls=calls)
        ]
