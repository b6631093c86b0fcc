"""A client's JSON read as RFC 8259 has it, and checked as text a model can be given (pure).

    loads(text)                                   JSON; NaN and ±Infinity, which Python's json
                                                  module reads, refused (ValueError)
    check_json(value, where=..., max_depth=...)   nested no deeper than `max_depth` levels,
                                                  every string and key UTF-8-encodable

A request body is checked so (runtime.openai.schema), and so is JSON that a body carries as
text and the server parses itself (an earlier tool call's `arguments`, runtime.openai.tool_schema):
what either holds reaches a chat template, a model and the logs, where a structure nested past
the interpreter's recursion limit (a template's `tojson`) or a lone surrogate (UTF-8) fails, and
where a NaN makes JSON text that is no JSON (a guide's schema, which the model's guided decoding
parses strictly).
"""

from __future__ import annotations

import json
from typing import Any

from runtime.openai.errors import OpenAIError

__all__ = ["MAX_DEPTH", "check_json", "loads"]

# As deep as a chat request needs (a tool's `parameters` schema inside a message inside a list).
MAX_DEPTH = 32


def loads(text: str | bytes) -> Any:
    """`text` as JSON (ValueError, or RecursionError past the parser's depth, when it is not);
    `NaN`, `Infinity` and `-Infinity` are not JSON, so they are refused too."""
    return json.loads(text, parse_constant=_not_json)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def check_json(
    value: Any, *, where: str, param: str | None = None, max_depth: int = MAX_DEPTH
) -> None:
    """Refuses (OpenAIError, naming `where`) a value nested past `max_depth` levels or holding
    a string that is not Unicode text."""
    _check(value, 0, where, param, max_depth)


def _check(value: Any, depth: int, where: str, param: str | None, max_depth: int) -> None:
    if depth > max_depth:
        raise OpenAIError(f"{where} is nested deeper than {max_depth} levels", param=param)
    if isinstance(value, str):
        _check_text(value, where, param)
    elif isinstance(value, dict):
        for key, child in value.items():
            _check_text(key, where, param)
            _check(child, depth + 1, where, param, max_depth)
    elif isinstance(value, list):
        for child in value:
            _check(child, depth + 1, where, param, max_depth)


def _check_text(text: str, where: str, param: str | None) -> None:
    """JSON's `\\ud800` escapes decode to lone surrogates, which no UTF-8 text holds."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise OpenAIError(
            f"{where} holds the lone surrogate {text[exc.start]!a} in a string (a "
            "\\u escape in \\ud800-\\udfff without its pair): that is not Unicode text",
            param=param,
        ) from None
