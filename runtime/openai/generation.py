"""One OpenAI generation request run on the models: its choices' text as it comes, and usage.

    GenerationRequest ─▶ a choice per (prompt, i < n): one infer request each (seed + i)
        each choice's responses ─▶ text deltas ─▶ StopScan (when the model takes no stop
        words) ─▶ Delta(index, text[, logprobs]) ... End(index, finish_reason)
    choices run concurrently; their events interleave in the order they arrive
    usage: prompt tokens once per prompt, generated tokens summed over every response

A model's error ends the whole request (raised from `events`); leaving the iteration early
(the client went away) cancels every choice's request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Protocol

from runtime.inference import InferRequest, InferResponse
from runtime.openai.logprobs import TokenLogprob
from runtime.openai.lora import LoraRequest
from runtime.openai.schema import SEED_RANGE, GenerationRequest, Sampling
from runtime.openai.triton_mapping import (
    ModelFace,
    generate_request,
    logprobs_of,
    text_of,
    token_counts,
)
from thawwire.openai_api import DEFAULT_MAX_TOKENS

__all__ = ["Delta", "End", "Generation", "StopScan", "Streams", "Usage"]


class Streams(Protocol):
    """What a generation calls on the models (runtime.models.service.ModelService.stream)."""

    def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]: ...


@dataclass(frozen=True, slots=True)
class Delta:
    """Choice `index`'s next text; with logprobs asked, the tokens it came from (`logprobs`,
    the first starting at character `offset` of the choice's text; None when not asked)."""

    index: int
    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None
    offset: int = 0


@dataclass(frozen=True, slots=True)
class End:
    index: int
    finish_reason: str  # "stop" or "length"


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reported: bool = False  # the model reported counts (else usage is unknown)

    def to_json(self) -> dict[str, int] | None:
        if not self.reported:
            return None
        total = self.prompt_tokens + self.completion_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": total,
        }


class StopScan:
    """Cuts a streamed text at the first stop sequence, holding back what may begin one."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = stops
        self._held = ""
        self.stopped = False

    def feed(self, delta: str) -> str:
        """The part of `delta` (after what was held) that is surely before any stop sequence."""
        text = self._held + delta
        cuts = [i for i in (text.find(s) for s in self._stops) if i >= 0]
        if cuts:
            self.stopped, self._held = True, ""
            return text[: min(cuts)]
        keep = max((_overlap(text, s) for s in self._stops), default=0)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


def _overlap(text: str, stop: str) -> int:
    """The length of the longest end of `text` that begins `stop`."""
    for size in range(min(len(text), len(stop) - 1), 0, -1):
        if stop.startswith(text[-size:]):
            return size
    return 0


class Generation:
    """The choices of one request on one model; iterate `events()` once."""

    def __init__(
        self,
        streams: Streams,
        face: ModelFace,
        request: GenerationRequest,
        prompts: tuple[str, ...],
        *,
        lora: LoraRequest | None = None,
    ) -> None:
        self._streams = streams
        self._face = face
        self._lora = lora  # the LoRA adapter every choice runs with (None: the base model)
        self._request = request
        self._prompts = prompts
        self.usage = Usage()
        # The model applies stop words itself when it takes them; else they are cut here.
        self._cut_stops = bool(request.sampling.stop) and not (
            face.vllm or "stop_words" in face.inputs
        )

    @property
    def choices(self) -> int:
        return len(self._prompts) * self._request.n

    async def events(self) -> AsyncIterator[Delta | End]:
        runs = [self._choice(index) for index in range(self.choices)]
        if len(runs) == 1:
            try:
                async for event in runs[0]:
                    yield event
            finally:
                await runs[0].aclose()  # type: ignore[attr-defined]  # the model's request too
            return
        queue: asyncio.Queue[Delta | End | BaseException | None] = asyncio.Queue()
        tasks = [asyncio.create_task(_pump(run, queue)) for run in runs]
        try:
            running = len(tasks)
            while running:
                item = await queue.get()
                if item is None:
                    running -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _sampling(self, index: int) -> tuple[str, Sampling]:
        """Choice `index`'s prompt and sampling (choice i of a prompt samples with seed + i,
        wrapped within the seeds a request may give, so every choice's is one too)."""
        prompt_index, i = divmod(index, self._request.n)
        sampling = self._request.sampling
        if sampling.seed is not None and i:  # n choices, n samples
            low, high = SEED_RANGE
            seed = (sampling.seed + i - low) % (high - low + 1) + low
            sampling = replace(sampling, seed=seed)
        return self._prompts[prompt_index], sampling

    async def _choice(self, index: int) -> AsyncIterator[Delta | End]:
        prompt, sampling = self._sampling(index)
        top = self._request.logprobs
        asked = self._request
        infer = generate_request(
            self._face,
            prompt,
            sampling,
            stream=asked.stream,
            echo=asked.echo,
            logprobs=top,
            guide=asked.guide,
            lora=self._lora,
        )
        if self._request.echo and not self._face.echoes:
            yield Delta(index, prompt)  # the prompt's tokens are not generated: no logprobs
        # Where the next token starts in the choice's text: after the echoed prompt, then
        # after each token's own text (so streamed and whole answers count alike).
        offset = len(prompt) if self._request.echo else 0
        scan = StopScan(sampling.stop) if self._cut_stops else None
        generated = 0
        # prompt tokens count once per prompt, from its first choice
        prompt_pending = index % self._request.n == 0
        stream = self._streams.stream(infer)
        try:
            async for response in stream:
                if response.flag_only:
                    continue
                response.checked()  # an error ends the choice, sent with the final flag or not
                generated += self._count(response, prompt=prompt_pending)
                prompt_pending = False
                text = text_of(response)
                if scan is not None:
                    text = scan.feed(text)
                tokens = None if top is None else tuple(logprobs_of(response, top=top))
                if text or tokens:
                    yield Delta(index, text, tokens, offset)
                    offset += sum(len(t.token) for t in tokens or ())
                if scan is not None and scan.stopped:
                    break  # the rest is past the stop sequence: end the model's request
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        if scan is not None and not scan.stopped and (rest := scan.flush()):
            yield Delta(index, rest)
        limit = sampling.max_tokens or DEFAULT_MAX_TOKENS
        stopped = scan is not None and scan.stopped
        yield End(index, "length" if not stopped and generated >= limit else "stop")

    def _count(self, response: InferResponse, *, prompt: bool) -> int:
        """The tokens this response generated (0 when the model reports none); adds usage."""
        counts = token_counts(response)
        if counts is None:
            return 0
        prompt_tokens, generated = counts
        if prompt:
            self.usage.prompt_tokens += prompt_tokens
        self.usage.reported = True
        self.usage.completion_tokens += generated
        return generated


async def _pump(
    run: AsyncIterator[Delta | End], queue: asyncio.Queue[Delta | End | BaseException | None]
) -> None:
    try:
        async for event in run:
            queue.put_nowait(event)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # handed to the consumer, which raises it as its own
        queue.put_nowait(exc)
    finally:
        queue.put_nowait(None)
