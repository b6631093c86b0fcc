"""The OpenAI response documents (pure): models, completions, chat, their stream chunks,
embeddings, and the Server-Sent Events that carry the chunks (the model list's entries are
thawwire.openai_api's, which `thaw up` writes too).

    completion   {"id": "cmpl-…", "object": "text_completion", "choices": [{"text", …}], "usage"}
    chat         {"id": "chatcmpl-…", "object": "chat.completion",
                  "choices": [{"message": {"role": "assistant", "content"[, "tool_calls"]},
                  …}], "usage"}
    chunks       "text_completion" / "chat.completion.chunk", one choice each; a chat choice's
                 first chunk carries the role; the usage chunk (stream_options.include_usage)
                 has no choices; the stream ends with `data: [DONE]`
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime.openai.logprobs import TokenLogprob, chat_logprobs, completion_logprobs

__all__ = ["DONE", "Answer", "embeddings", "sse"]

DONE = b"data: [DONE]\n\n"


def sse(doc: dict[str, Any]) -> bytes:
    """One Server-Sent Event carrying `doc`."""
    return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"


@dataclass(frozen=True, slots=True)
class Answer:
    """The documents of one generation request: `chat` or completions, one id, one time."""

    model: str
    created: int
    chat: bool
    id: str = ""

    @classmethod
    def new(cls, model: str, created: int, *, chat: bool) -> Answer:
        prefix = "chatcmpl-" if chat else "cmpl-"
        return cls(model, created, chat, prefix + uuid.uuid4().hex)

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def _logprobs(
        self, tokens: tuple[TokenLogprob, ...] | None, offset: int
    ) -> dict[str, Any] | None:
        if tokens is None:
            return None
        return chat_logprobs(tokens) if self.chat else completion_logprobs(tokens, offset=offset)

    def whole(
        self,
        texts: list[str | None],
        finish: list[str],
        usage: dict[str, int] | None,
        logprobs: list[tuple[int, tuple[TokenLogprob, ...]] | None] | None = None,
        tool_calls: list[list[dict[str, Any]] | None] | None = None,
    ) -> dict[str, Any]:
        """The non-streamed answer: every choice's whole text (and with `logprobs`, each
        choice's tokens after the character offset where the first starts; a chat choice's
        `tool_calls`, where it made calls)."""
        per_choice = logprobs if logprobs is not None else [None] * len(texts)
        lp = [None if c is None else self._logprobs(c[1], c[0]) for c in per_choice]
        if self.chat:
            calls = tool_calls if tool_calls is not None else [None] * len(texts)
            choices = [
                {
                    "index": i,
                    "message": _message(text, calls[i]),
                    "finish_reason": finish[i],
                    "logprobs": lp[i],
                }
                for i, text in enumerate(texts)
            ]
            return {**self._head("chat.completion"), "choices": choices, "usage": usage}
        choices = [
            {"index": i, "text": text, "finish_reason": finish[i], "logprobs": lp[i]}
            for i, text in enumerate(texts)
        ]
        return {**self._head("text_completion"), "choices": choices, "usage": usage}

    def chunk(
        self,
        index: int,
        text: str | None,
        *,
        finish_reason: str | None = None,
        role: bool = False,
        usage: bool = False,
        logprobs: tuple[TokenLogprob, ...] | None = None,
        offset: int = 0,
        tool_calls: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """One streamed chunk of choice `index` (`usage`: the stream carries a usage chunk,
        so every other chunk says `"usage": null`; `logprobs`: the tokens of `text`, the
        first at character `offset` of the choice's text; `tool_calls`: call deltas)."""
        lp = self._logprobs(logprobs, offset)
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant"} if role else {}
            if text is not None:
                delta["content"] = text
            if tool_calls:
                delta["tool_calls"] = tool_calls
            choice = {
                "index": index,
                "delta": delta,
                "finish_reason": finish_reason,
                "logprobs": lp,
            }
            doc = {**self._head("chat.completion.chunk"), "choices": [choice]}
        else:
            choice = {
                "index": index,
                "text": text or "",
                "finish_reason": finish_reason,
                "logprobs": lp,
            }
            doc = {**self._head("text_completion"), "choices": [choice]}
        if usage:
            doc["usage"] = None
        return doc

    def usage_chunk(self, usage: dict[str, int] | None) -> dict[str, Any]:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._head(kind), "choices": [], "usage": usage}


def _message(text: str | None, tool_calls: list[dict[str, Any]] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def embeddings(
    model: str, vectors: list[list[float]], *, as_base64: bool, prompt_tokens: int
) -> dict[str, Any]:
    """The embeddings answer; base64 is the float32 vector's little-endian bytes (OpenAI's)."""
    data = []
    for index, vector in enumerate(vectors):
        value: list[float] | str = vector
        if as_base64:
            value = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
        data.append({"object": "embedding", "index": index, "embedding": value})
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    return {"object": "list", "data": data, "model": model, "usage": usage}
