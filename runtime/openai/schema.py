"""OpenAI request bodies, parsed strictly into value objects (pure; untrusted input).

    completions       {"model", "prompt": str | [str], "max_tokens", "n", "stop", ...}
    chat/completions  {"model", "messages": [{"role", "content"}], "max_completion_tokens", ...}
    embeddings        {"model", "input": str | [str], "encoding_format", "dimensions"}

Every field is type- and range-checked; a refusal is an OpenAIError naming the field (`param`).
Fields this server does not honour (`logit_bias`, token-id prompts) are refused rather than
ignored; fields that change nothing here (`user`, `metadata`) are accepted. A chat's tools are
parsed by tool_schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.openai.errors import OpenAIError
from runtime.openai.json_text import check_json, loads
from runtime.openai.response_format import Guide, parse_response_format
from runtime.openai.tool_schema import (
    MessageToolCall,
    ToolMode,
    ToolRequest,
    message_tool_calls,
    parse_tools,
)
from thawwire.openai_api import MAX_TOKENS_LIMIT

__all__ = [
    "MAX_CHOICES",
    "MAX_INPUTS",
    "SEED_RANGE",
    "ChatMessage",
    "EmbeddingRequest",
    "GenerationRequest",
    "Sampling",
    "parse_body",
    "parse_chat",
    "parse_completion",
    "parse_embedding",
]

# The most choices one request may ask for (prompts x n): each is one request to the model.
MAX_CHOICES = 16
# The most strings one embeddings request may carry (each is one request to the model).
MAX_INPUTS = 256
_MAX_STOP = 4
# OpenAI's bounds: completions' `logprobs`, chat's `top_logprobs` (tokens per position).
_MAX_COMPLETION_LOGPROBS = 5
_MAX_TOP_LOGPROBS = 20
_MAX_MESSAGES = 1024
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
# OpenAI's (and Triton's frontend's) seed: a signed 64-bit integer. A model whose `seed` input
# is UINT64 gets a negative one wrapped (triton_mapping).
SEED_RANGE = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True, slots=True)
class Sampling:
    """What shapes the generated text; None where the client left the model's default."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    frequency_penalty: float | None = None
    presence_penalty: float | None = None


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str
    # An assistant's calls (the conversation so far), a tool message's answer to one.
    tool_calls: tuple[MessageToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def to_template(self) -> dict[str, Any]:
        """The message as Hugging Face chat templates take it."""
        doc: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            doc["tool_calls"] = [call.to_template() for call in self.tool_calls]
        if self.tool_call_id is not None:
            doc["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            doc["name"] = self.name
        return doc


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """A completions request (`prompts`) or a chat one (`messages`), `n` choices each."""

    model: str
    sampling: Sampling
    prompts: tuple[str, ...] = ()
    messages: tuple[ChatMessage, ...] = ()
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    echo: bool = False
    # How many of the most likely tokens to report at each generated position; None: no
    # logprobs asked (completions' `logprobs` > 0, or chat's `logprobs: true`).
    logprobs: int | None = None
    tools: ToolRequest = field(default_factory=ToolRequest)
    # `response_format`'s guide (runtime.openai.response_format); None: none asked.
    response_format: Guide | None = None

    @property
    def is_chat(self) -> bool:
        return bool(self.messages)

    @property
    def guide(self) -> Guide | None:
        """What every choice's text must follow: `response_format`'s, or a named tool
        choice's tool's `parameters` (never both: _generation refuses that)."""
        if self.response_format is not None:
            return self.response_format
        schema = self.tools.guide
        return None if schema is None else Guide.of_schema(schema)


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    model: str
    inputs: tuple[str, ...]
    base64: bool = False
    dimensions: int | None = None


def parse_body(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object of Unicode text, nested no deeper than a chat request needs."""
    try:
        doc = loads(raw)
    except (ValueError, RecursionError) as exc:
        raise OpenAIError(f"request body is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(doc, dict):
        raise OpenAIError("request body must be a JSON object")
    # Every string goes to a model, a template or a log as UTF-8: one holding a lone surrogate
    # (JSON's `\ud800` escape) is refused here.
    check_json(doc, where="request body")
    return doc


def parse_completion(doc: dict[str, Any]) -> GenerationRequest:
    """POST /v1/completions."""
    prompt = doc.get("prompt")
    prompts = (prompt,) if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list | tuple) or not prompts:
        raise OpenAIError(
            "'prompt' must be a string or a non-empty list of strings", param="prompt"
        )
    if not all(isinstance(p, str) for p in prompts):
        raise OpenAIError("'prompt' as token ids is not supported: send text", param="prompt")
    if not all(prompts):
        # A vLLM model cannot start from nothing (Triton's frontend refuses it too).
        raise OpenAIError("'prompt' must not hold an empty string", param="prompt")
    echo = _optional(doc, "echo", bool, False)
    logprobs = _bounded(doc, "logprobs", _MAX_COMPLETION_LOGPROBS)
    if doc.get("suffix"):
        raise OpenAIError("'suffix' is not supported", param="suffix")
    best_of = _optional(doc, "best_of", int, None)
    if best_of is not None and best_of != 1:
        raise OpenAIError("'best_of' other than 1 is not supported", param="best_of")
    sampling = _sampling(doc, max_tokens=_optional(doc, "max_tokens", int, None))
    asked = logprobs if logprobs else None  # 0 asks for none (Triton's frontend's rule)
    return _generation(doc, sampling, prompts=tuple(prompts), echo=echo, logprobs=asked)


def parse_chat(doc: dict[str, Any]) -> GenerationRequest:
    """POST /v1/chat/completions."""
    raw = doc.get("messages")
    if not isinstance(raw, list) or not raw:
        raise OpenAIError("'messages' must be a non-empty list", param="messages")
    if len(raw) > _MAX_MESSAGES:
        raise OpenAIError(f"'messages' holds more than {_MAX_MESSAGES} messages", param="messages")
    messages = tuple(_message(m, i) for i, m in enumerate(raw))
    logprobs = _optional(doc, "logprobs", bool, False)
    top = _bounded(doc, "top_logprobs", _MAX_TOP_LOGPROBS)
    if top is not None and not logprobs:
        # Triton's frontend's words (its tests match them)
        message = "`top_logprobs` can only be used when `logprobs` is True"
        raise OpenAIError(message, param="top_logprobs")
    tools = parse_tools(doc)
    limit = _optional(doc, "max_completion_tokens", int, None)
    if limit is None:
        limit = _optional(doc, "max_tokens", int, None)
    # Without `top_logprobs`, one per position, as Triton's frontend asks its vLLM model.
    asked = (1 if top is None else top) if logprobs else None
    sampling = _sampling(doc, max_tokens=limit)
    return _generation(doc, sampling, messages=messages, logprobs=asked, tools=tools)


def _generation(
    doc: dict[str, Any],
    sampling: Sampling,
    *,
    prompts: tuple[str, ...] = (),
    messages: tuple[ChatMessage, ...] = (),
    echo: bool = False,
    logprobs: int | None = None,
    tools: ToolRequest | None = None,
) -> GenerationRequest:
    n = _optional(doc, "n", int, 1)
    count = n * max(len(prompts), 1)
    if n < 1 or count > MAX_CHOICES:
        raise OpenAIError(
            f"`n` = {n} with {max(len(prompts), 1)} prompt(s), must give 1 to {MAX_CHOICES} "
            "choices",
            param="n",
        )
    if doc.get("logit_bias"):
        raise OpenAIError("'logit_bias' is not supported", param="logit_bias")
    stream = _optional(doc, "stream", bool, False)
    options = doc.get("stream_options")
    if options is not None and not stream:
        # Triton's frontend's words (its tests match them)
        message = "`stream_options` can only be used when `stream` is True"
        raise OpenAIError(message, param="stream_options")
    if options is not None and not isinstance(options, dict):
        raise OpenAIError("'stream_options' must be an object", param="stream_options")
    include_usage = _optional(options or {}, "include_usage", bool, False, param="stream_options")
    response_format = parse_response_format(doc)
    named = tools is not None and tools.mode is ToolMode.NAMED
    if response_format is not None and named:
        raise OpenAIError(
            "'response_format' cannot be used with a named or \"required\" 'tool_choice': "
            "each constrains the answer's text (the tool's parameters guide it)",
            param="response_format",
        )
    return GenerationRequest(
        model=_model(doc),
        sampling=sampling,
        prompts=prompts,
        messages=messages,
        n=n,
        stream=stream,
        include_usage=include_usage,
        echo=echo,
        logprobs=logprobs,
        tools=tools or ToolRequest(),
        response_format=response_format,
    )


def _bounded(doc: dict[str, Any], key: str, high: int) -> int | None:
    value = _optional(doc, key, int, None)
    if value is not None and not 0 <= value <= high:
        raise OpenAIError(f"'{key}' = {value}, must be in [0, {high}]", param=key)
    return value


def _sampling(doc: dict[str, Any], *, max_tokens: int | None) -> Sampling:
    if max_tokens is not None and not 1 <= max_tokens <= MAX_TOKENS_LIMIT:
        raise OpenAIError(
            f"'max_tokens' = {max_tokens}, must be in [1, {MAX_TOKENS_LIMIT}]", param="max_tokens"
        )
    seed = _optional(doc, "seed", int, None)
    if seed is not None and not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise OpenAIError(
            f"'seed' = {seed}, must be a signed 64-bit integer, in [-2**63, 2**63 - 1]",
            param="seed",
        )
    return Sampling(
        max_tokens=max_tokens,
        temperature=_number(doc, "temperature", 0.0, 2.0),
        top_p=_number(doc, "top_p", 0.0, 1.0),
        seed=seed,
        stop=_stop(doc.get("stop")),
        frequency_penalty=_number(doc, "frequency_penalty", -2.0, 2.0),
        presence_penalty=_number(doc, "presence_penalty", -2.0, 2.0),
    )


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    words = [value] if isinstance(value, str) else value
    if not isinstance(words, list) or not all(isinstance(w, str) and w for w in words):
        raise OpenAIError("'stop' must be a string or a list of non-empty strings", param="stop")
    if len(words) > _MAX_STOP:
        raise OpenAIError(f"'stop' holds more than {_MAX_STOP} sequences", param="stop")
    return tuple(words)


def _message(value: Any, index: int) -> ChatMessage:
    param = f"messages[{index}]"
    if not isinstance(value, dict):
        raise OpenAIError(f"{param} must be an object", param=param)
    role = value.get("role")
    if not isinstance(role, str) or role not in _ROLES:  # a list or object is unhashable
        raise OpenAIError(f"{param}.role must be one of {sorted(_ROLES)}", param=f"{param}.role")
    calls = message_tool_calls(value.get("tool_calls"), f"{param}.tool_calls")
    if calls and role != "assistant":
        raise OpenAIError(f"{param}: only an assistant's message has 'tool_calls'", param=param)
    call_id = value.get("tool_call_id")
    if role == "tool" and not isinstance(call_id, str):
        raise OpenAIError(f"{param}: a tool message needs 'tool_call_id'", param=param)
    name = value.get("name")
    if name is not None and not isinstance(name, str):
        raise OpenAIError(f"{param}.name must be a string", param=f"{param}.name")
    if value.get("content") is None and role != "assistant":
        # OpenAI's API requires it of every role but the assistant's (whose turn may be tool
        # calls or a refusal alone); an empty prompt in its place would hide the mistake.
        raise OpenAIError(f"{param}.content is required", param=f"{param}.content")
    content = _content(value.get("content"), param, assistant=role == "assistant")
    return ChatMessage(
        role, content, calls, call_id if role == "tool" else None, name if name else None
    )


def _content(content: Any, param: str, *, assistant: bool) -> str:
    """A message's text: a string, or its parts' texts joined. An assistant's parts may be
    `refusal`s too (OpenAI's API takes them back in a conversation); their text is its words,
    as vLLM's server renders them."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text" and not (assistant and kind == "refusal"):
                only = "only text and refusal parts are" if assistant else "only text parts are"
                raise OpenAIError(f"{param}.content: {only} supported", param=f"{param}.content")
            text = part.get(kind)
            if not isinstance(text, str):
                raise OpenAIError(
                    f"{param}.content: a {kind} part needs '{kind}'", param=f"{param}.content"
                )
            texts.append(text)
        return "".join(texts)
    raise OpenAIError(
        f"{param}.content must be a string or a list of parts", param=f"{param}.content"
    )


def parse_embedding(doc: dict[str, Any]) -> EmbeddingRequest:
    """POST /v1/embeddings."""
    value = doc.get("input")
    inputs = [value] if isinstance(value, str) else value
    if not isinstance(inputs, list) or not inputs:
        raise OpenAIError("'input' must be a string or a non-empty list of strings", param="input")
    if not all(isinstance(i, str) for i in inputs):
        raise OpenAIError("'input' as token ids is not supported: send text", param="input")
    if len(inputs) > MAX_INPUTS:
        raise OpenAIError(f"'input' holds more than {MAX_INPUTS} strings", param="input")
    if any(not i for i in inputs):
        raise OpenAIError("'input' must not hold an empty string", param="input")
    encoding = doc.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise OpenAIError("'encoding_format' must be 'float' or 'base64'", param="encoding_format")
    dimensions = _optional(doc, "dimensions", int, None)
    if dimensions is not None and dimensions < 1:
        raise OpenAIError("'dimensions' must be at least 1", param="dimensions")
    return EmbeddingRequest(
        model=_model(doc), inputs=tuple(inputs), base64=encoding == "base64", dimensions=dimensions
    )


def _model(doc: dict[str, Any]) -> str:
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIError("'model' must be a non-empty string", param="model")
    return model


def _optional(
    doc: dict[str, Any], key: str, kind: type, default: Any, *, param: str | None = None
) -> Any:
    value = doc.get(key)
    if value is None:
        return default
    # bool is an int in Python; a JSON `true` is never a count.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise OpenAIError(f"'{key}' must be of type {kind.__name__}", param=param or key)
    return value


def _number(doc: dict[str, Any], key: str, low: float, high: float) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OpenAIError(f"'{key}' must be a number", param=key)
    if not low <= value <= high:
        raise OpenAIError(f"'{key}' = {value}, must be in [{low:g}, {high:g}]", param=key)
    return float(value)
