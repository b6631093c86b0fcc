"""One chat choice's text as OpenAI's answer with tool calls, by the request's ToolMode.

PLAIN   the text is content
NAMED   one call of the chosen function; the text is its arguments (streamed: the first
        delta names it, then each text delta is more arguments); finish_reason the model's
PARSED  the server's parser (tool_parsers) reads the text: content and calls; with a call,
        finish_reason "tool_calls"; streamed, deltas as the parser recognises them, until
        the text passes `max_parse_bytes`: then the stream is cut ("length"), as Triton's
        frontend bounds its parser's work per request (`--max-tool-call-parse-bytes`)
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from runtime.openai.tool_parsers import ToolCallDelta, ToolCallReader, read_whole
from runtime.openai.tool_schema import ToolMode, ToolRequest

__all__ = ["Piece", "ToolStream", "WholeMessage", "whole_message"]


@dataclass(frozen=True, slots=True)
class WholeMessage:
    """A non-streamed choice's message fields and, when calls made it, its finish reason."""

    content: str | None
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str | None = None  # None: the model's own


def whole_message(text: str, tools: ToolRequest, parser: str | None) -> WholeMessage:
    """The message a choice's whole `text` makes."""
    mode = tools.mode
    if mode is ToolMode.NAMED:
        function = {"name": tools.name, "arguments": text}
        return WholeMessage(None, [{"id": _call_id(), "type": "function", "function": function}])
    if mode is ToolMode.PARSED and parser is not None:
        answer = read_whole(text, parser, parallel=tools.parallel)
        if answer.calls:
            calls = [c.to_json() for c in answer.calls]
            return WholeMessage(answer.content, calls, "tool_calls")
    return WholeMessage(text)


@dataclass(slots=True)
class Piece:
    """What one text delta adds to a streamed choice: content, and call deltas (as JSON)."""

    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.tool_calls)


class ToolStream:
    """One streamed choice's text, turned into content and call deltas as it comes."""

    def __init__(self, tools: ToolRequest, parser: str | None, *, max_parse_bytes: int) -> None:
        self._mode = tools.mode
        self._name = tools.name if self._mode is ToolMode.NAMED else ""
        self._reader = (
            ToolCallReader(parser, parallel=tools.parallel)
            if self._mode is ToolMode.PARSED and parser is not None
            else None
        )
        self._limit = max_parse_bytes
        self._parsed_bytes = 0
        self._named_sent = False

    @property
    def passthrough(self) -> bool:
        """The text is content as it comes (no tools in play)."""
        return self._mode is ToolMode.PLAIN or (self._mode is ToolMode.PARSED and not self._reader)

    def over_limit(self, text: str) -> bool:
        """`text` would take the parsed text past the limit (then the stream is cut)."""
        if self._reader is None:
            return False
        self._parsed_bytes += len(text.encode("utf-8"))
        return self._parsed_bytes > self._limit

    def feed(self, text: str) -> Piece:
        if self._mode is ToolMode.NAMED:
            if not text and self._named_sent:
                return Piece()
            delta = ToolCallDelta(0, text)
            if not self._named_sent:
                self._named_sent = True
                delta = ToolCallDelta(0, text, id=_call_id(), name=self._name)
            return Piece(tool_calls=[delta.to_json()])
        if self._reader is None:
            return Piece(content=text)
        content, deltas = self._reader.feed(text)
        return Piece(content, [d.to_json() for d in deltas])

    def finish(self, model_reason: str) -> tuple[Piece, str]:
        """What was held back, and the choice's finish reason."""
        if self._reader is None:
            return Piece(), model_reason
        held = Piece(self._reader.finish())
        return held, "tool_calls" if self._reader.called else model_reason


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"
