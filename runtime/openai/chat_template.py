"""A chat's messages as one prompt: the model's own chat template, or a documented fallback.

    <repository>/<model>/<version>/tokenizer_config.json   first found wins: its
    <repository>/<model>/tokenizer_config.json             `chat_template` (Hugging Face's)
      └─ rendered with jinja2 (sandboxed, as transformers renders it), `messages` (with
         their `tool_calls`, arguments as objects), `tools` (the request's, else none),
         `add_generation_prompt=True`, `bos_token` and `eos_token` from the same file
    neither (or jinja2 not installed)  ─▶ FALLBACK: "role: content" a line, then "assistant:"
                                      (a line "tools: [...]" first when the request has tools)

A template that fails to render is the model's fault: a 500 naming the model, not a fallback.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runtime.openai.errors import OpenAIError
from runtime.openai.schema import ChatMessage

__all__ = ["ChatTemplates", "fallback_prompt"]

logger = logging.getLogger(__name__)

TOKENIZER_CONFIG = "tokenizer_config.json"
_MAX_CONFIG_BYTES = 16 << 20


def fallback_prompt(messages: Sequence[ChatMessage], tools: Sequence[dict[str, Any]] = ()) -> str:
    """The prompt for a model without a chat template: a line per message, then the cue (an
    assistant's earlier calls as their JSON; the request's tools as a first line)."""
    lines = [f"tools: {json.dumps(list(tools))}"] if tools else []
    for m in messages:
        calls = [c.to_template()["function"] for c in m.tool_calls]
        content = m.content or (json.dumps(calls) if calls else "")
        lines.append(f"{m.role}: {content}")
    return "\n".join([*lines, "assistant:"])


class _Template:
    def __init__(self, source: str, config: dict[str, Any]) -> None:
        import jinja2.sandbox  # optional: only a model with a chat template needs it

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        self._template = env.from_string(source)
        self._tokens = {k: _token(config.get(k)) for k in ("bos_token", "eos_token")}
        self._error = jinja2.exceptions.TemplateError

    def render(
        self, model: str, messages: Sequence[ChatMessage], tools: Sequence[dict[str, Any]]
    ) -> str:
        docs = [m.to_template() for m in messages]
        try:
            return str(
                self._template.render(
                    messages=docs,
                    tools=list(tools) or None,
                    add_generation_prompt=True,
                    **self._tokens,
                )
            )
        except self._error as exc:
            raise OpenAIError(
                f"model '{model}': its chat template refused the messages: {exc}"
            ) from None


def _token(value: Any) -> str:
    if isinstance(value, dict):  # {"content": "<s>", ...} in older tokenizer files
        value = value.get("content")
    return value if isinstance(value, str) else ""


class ChatTemplates:
    """The chat template of each model in the repositories, read once per file change."""

    def __init__(self, repositories: Sequence[Path]) -> None:
        self._repositories = tuple(repositories)
        self._cache: dict[Path, tuple[int, _Template | None]] = {}
        self._jinja = _has_jinja()

    async def prompt(
        self,
        model: str,
        version: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[dict[str, Any]] = (),
    ) -> str:
        """The prompt `messages` (and the request's `tools`) make for `model` (its template,
        or the fallback)."""
        template = await asyncio.to_thread(self._load, model, version) if self._jinja else None
        if template is None:
            return fallback_prompt(messages, tools)
        return template.render(model, messages, tools)

    def _load(self, model: str, version: str) -> _Template | None:
        """The model's template (in a thread: it stats and reads files)."""
        path = self._find(model, version)
        if path is None:
            return None
        stamp = path.stat().st_mtime_ns
        cached = self._cache.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        template = self._read(model, path)
        self._cache[path] = (stamp, template)
        return template

    def _find(self, model: str, version: str) -> Path | None:
        for repository in self._repositories:
            base = repository / model
            for folder in (base / version, base) if version else (base,):
                path = folder / TOKENIZER_CONFIG
                if path.is_file():
                    return path
        return None

    def _read(self, model: str, path: Path) -> _Template | None:
        if path.stat().st_size > _MAX_CONFIG_BYTES:
            raise OpenAIError(f"model '{model}': its {TOKENIZER_CONFIG} is too large", status=500)
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise OpenAIError(
                f"model '{model}': its {TOKENIZER_CONFIG} cannot be read: {exc}", status=500
            ) from None
        source = config.get("chat_template") if isinstance(config, dict) else None
        if isinstance(source, list):  # named templates: the "default" one
            named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
            source = named.get("default")
        if not isinstance(source, str):
            logger.debug("model=%s has no chat_template in %s", model, path.name)
            return None
        import jinja2.exceptions

        try:
            return _Template(source, config)
        except jinja2.exceptions.TemplateError as exc:
            raise OpenAIError(
                f"model '{model}': its chat template does not parse: {exc}", status=500
            ) from None


def _has_jinja() -> bool:
    try:
        import jinja2.sandbox  # noqa: F401
    except ImportError:
        logger.info("jinja2 is not installed: chat prompts use the fallback template")
        return False
    return True
