"""A chat request's tools, parsed strictly (pure; untrusted input), and what they ask for.

    tools                [{"type": "function", "function": {"name", "description",
                          "parameters", "strict"}}]                 at most 128, names unique
    tool_choice          "none" | "auto" | "required" | {"type": "function", "function": {"name"}}
    parallel_tool_calls  bool (false: the first call only)
    messages             an assistant's `tool_calls` [{"id", "type", "function": {"name",
                         "arguments": JSON text}}]; a tool message's `tool_call_id`

The mode each request gets, as Triton's OpenAI frontend decides it (`ToolRequest.mode`):
no tools or "none" ─▶ PLAIN text; a named tool, or "required" (the first tool) ─▶ NAMED: the
model's text is that tool's arguments; "auto" or unset with tools ─▶ PARSED by the server's
`--tool-call-parser` (without one, refused in Triton's words: `check_parser`).

A NAMED answer is guided (`ToolRequest.guide`, Triton's frontend's `_get_guided_json_from_tool`):
the tool's `parameters` JSON schema, as compact JSON text, for the model to constrain its text to
(runtime.openai.triton_mapping says how each kind of model is given it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from runtime.openai.errors import OpenAIError
from runtime.openai.json_text import check_json, loads
from runtime.openai.response_format import schema_text

__all__ = ["MessageToolCall", "ToolMode", "ToolRequest", "message_tool_calls", "parse_tools"]

_MAX_TOOLS = 128
_MAX_CALLS = 128
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_CHOICES = ("none", "auto", "required")


class ToolMode(StrEnum):
    PLAIN = "plain"  # the answer is text (tools, if any, only reach the chat template)
    NAMED = "named"  # the answer is one call of `ToolRequest.name`, the text its arguments
    PARSED = "parsed"  # the text is read for calls by the server's tool-call parser


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """A chat request's tools (as the chat template takes them) and its choice."""

    tools: tuple[dict[str, Any], ...] = ()
    choice: str | None = None  # "none" | "auto" | "required" | None (unset)
    named: str | None = None  # the function a named tool_choice names
    parallel: bool = True

    @property
    def mode(self) -> ToolMode:
        if self.named is not None or self.choice == "required":
            return ToolMode.NAMED
        if self.tools and self.choice in (None, "auto"):
            return ToolMode.PARSED
        return ToolMode.PLAIN

    @property
    def name(self) -> str:
        """The function a NAMED answer calls: the named one, or (required) the first tool."""
        return self.named or str(self.tools[0]["function"]["name"])

    @property
    def guide(self) -> str | None:
        """The JSON schema a NAMED answer is guided by: its tool's `parameters` as compact JSON
        text (pydantic's `model_dump_json`, as Triton's frontend writes it); None for any other
        mode, or a tool that declares no `parameters` (nothing to guide by)."""
        if self.mode is not ToolMode.NAMED or not self.tools:
            return None
        functions = {t["function"]["name"]: t["function"] for t in self.tools}
        schema = functions.get(self.name, {}).get("parameters")
        if schema is None:
            return None
        return schema_text(schema)

    def check_parser(self, parser: str | None) -> None:
        """Refuses a request that needs a tool-call parser when the server has none."""
        if parser is not None:
            return
        # Triton's frontend's words
        if self.choice == "auto":
            raise OpenAIError(
                '"auto" tool choice requires --tool-call-parser to be set', param="tool_choice"
            )
        if self.choice is None and self.named is None and self.tools:
            raise OpenAIError(
                "having tools in the request requires --tool-call-parser to be set",
                param="tools",
            )


@dataclass(frozen=True, slots=True)
class MessageToolCall:
    """A call an assistant message made earlier in the conversation."""

    id: str
    name: str
    arguments: dict[str, Any]

    def to_template(self) -> dict[str, Any]:
        """As transformers' chat templates take it: arguments as an object, not text."""
        function = {"name": self.name, "arguments": self.arguments}
        return {"id": self.id, "type": "function", "function": function}


def parse_tools(doc: dict[str, Any]) -> ToolRequest:
    """`tools`, `tool_choice` and `parallel_tool_calls` of a chat request."""
    for legacy in ("functions", "function_call"):
        if doc.get(legacy) is not None:
            raise OpenAIError(
                f"'{legacy}' (deprecated) is not supported: use 'tools'", param=legacy
            )
    tools = _tools(doc.get("tools"))
    parallel = doc.get("parallel_tool_calls", True)
    if parallel is None:
        parallel = True
    if not isinstance(parallel, bool):
        raise OpenAIError("'parallel_tool_calls' must be of type bool", param="parallel_tool_calls")
    choice, named = _choice(doc.get("tool_choice"))
    if choice == "required" and not tools:
        # Triton's frontend's words
        raise OpenAIError(
            '"required" tool choice requires CreateChatCompletionRequest.tools to be provided',
            param="tool_choice",
        )
    if named is not None:
        if not tools:
            raise OpenAIError(
                "Named tool choice requires CreateChatCompletionRequest.tools to be provided",
                param="tool_choice",
            )
        if named not in {t["function"]["name"] for t in tools}:
            raise OpenAIError(
                f"Tool '{named}' has not been passed in `tools`.", param="tool_choice"
            )
    return ToolRequest(tools=tools, choice=choice, named=named, parallel=parallel)


def _tools(value: Any) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise OpenAIError("'tools' must be a list", param="tools")
    if len(value) > _MAX_TOOLS:
        raise OpenAIError(f"'tools' holds more than {_MAX_TOOLS} tools", param="tools")
    tools = tuple(_tool(t, i) for i, t in enumerate(value))
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        raise OpenAIError("'tools' names a function twice", param="tools")
    return tools


def _tool(value: Any, index: int) -> dict[str, Any]:
    param = f"tools[{index}]"
    if not isinstance(value, dict) or value.get("type") != "function":
        raise OpenAIError(f"{param} must be an object of type 'function'", param=param)
    function = value.get("function")
    if not isinstance(function, dict):
        raise OpenAIError(f"{param}.function must be an object", param=f"{param}.function")
    name = function.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise OpenAIError(
            f"{param}.function.name must be 1 to 64 letters, digits, '_', '-', '.' or ':'",
            param=f"{param}.function.name",
        )
    out: dict[str, Any] = {"name": name}
    for key, kind in (("description", str), ("parameters", dict), ("strict", bool)):
        item = function.get(key)
        if item is None:
            continue
        if not isinstance(item, kind):
            raise OpenAIError(
                f"{param}.function.{key} must be of type {kind.__name__}",
                param=f"{param}.function.{key}",
            )
        out[key] = item
    return {"type": "function", "function": out}


def _choice(value: Any) -> tuple[str | None, str | None]:
    if value is None:
        return None, None
    if isinstance(value, str):
        if value not in _CHOICES:
            raise OpenAIError(
                f"'tool_choice' must be one of {list(_CHOICES)} or a named function",
                param="tool_choice",
            )
        return value, None
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if (
        not isinstance(name, str)
        or not isinstance(value, dict)
        or value.get("type") != "function"
        or not name
    ):
        raise OpenAIError(
            '\'tool_choice\' as an object must be {"type": "function", "function": {"name": ...}}',
            param="tool_choice",
        )
    return None, name


def message_tool_calls(value: Any, param: str) -> tuple[MessageToolCall, ...]:
    """An assistant message's `tool_calls` (arguments: a JSON object as text)."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > _MAX_CALLS:
        raise OpenAIError(f"{param} must be a list of at most {_MAX_CALLS} calls", param=param)
    calls = []
    for i, call in enumerate(value):
        where = f"{param}[{i}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(call.get("id"), str):
            raise OpenAIError(f"{where} must have an 'id' and a 'function'", param=where)
        name, text = function.get("name"), function.get("arguments")
        if not isinstance(name, str) or not isinstance(text, str):
            raise OpenAIError(
                f"{where}.function must have a 'name' and 'arguments' (text)", param=where
            )
        try:
            arguments = loads(text)
        except (ValueError, RecursionError):
            arguments = None
        if not isinstance(arguments, dict):
            raise OpenAIError(
                f"{where}.function.arguments must be a JSON object, as text", param=where
            )
        # The body's own rules, for the JSON it carried as text (a template renders it).
        check_json(arguments, where=f"{where}.function.arguments", param=where)
        calls.append(MessageToolCall(call["id"], name, arguments))
    return tuple(calls)
