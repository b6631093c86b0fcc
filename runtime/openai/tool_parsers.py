"""A model's tool-call text, read as it grows: Mistral's and Llama 3's formats (pure).

    mistral   [content] "[TOOL_CALLS]" [{"name": ..., "arguments": {...}}, ...] [content]
              (or the array alone, from its first "[")
    llama3    ["<|python_tag|>"] {"name": ..., "arguments"|"parameters": {...}} [; {...}]...
              (only from the text's start: anything else is content)

`ToolCallReader` is fed the text as the model streams it and says, each time, what is new:
content, a call's name (with its id), or more of a call's arguments, which are the model's own
JSON text of them, passed on as it arrives (so a streamed call's arguments, joined, are exactly
the whole answer's). Each feed reads the calls' text again, going on where the last read of an
unfinished value stopped (tool_call_scan's `Progress`), and a delta that only lengthens a string
of the arguments is added to them without a read: a stream costs about its length (plus a copy
of the text per delta); the streaming caller still bounds it (`max_tool_call_parse_bytes`), as
Triton's frontend does. Text that stops being JSON is content, never an error: `read_whole`
then gives the whole text as content and no calls.
"""

from __future__ import annotations

import random
import re
import string
import uuid
from dataclasses import dataclass

from runtime.openai.tool_call_scan import (
    Call,
    Malformed,
    Progress,
    Read,
    llama_calls,
    mistral_calls,
    skip_whitespace,
)
from thawwire.openai_api import TOOL_CALL_PARSERS

__all__ = [
    "PARSERS",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallReader",
    "WholeAnswer",
    "read_whole",
]

PARSERS = TOOL_CALL_PARSERS

_STRING_END = re.compile(r'["\\]')  # what may end (or escape within) a JSON string
_MISTRAL_TOKEN = "[TOOL_CALLS]"
_LLAMA_TOKEN = "<|python_tag|>"
_ALNUM = string.ascii_letters + string.digits


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model made: OpenAI's `{"id", "type": "function", "function"}`."""

    id: str
    name: str
    arguments: str  # a JSON object, as text

    def to_json(self) -> dict[str, object]:
        function = {"name": self.name, "arguments": self.arguments}
        return {"id": self.id, "type": "function", "function": function}


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """What is new of call `index`: its first delta names it (`id`, `name`), later ones carry
    more of its arguments' text."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None

    def to_json(self) -> dict[str, object]:
        function: dict[str, str] = {"arguments": self.arguments}
        doc: dict[str, object] = {"index": self.index}
        if self.name is not None:
            doc["id"], doc["type"] = self.id, "function"
            function = {"name": self.name, "arguments": self.arguments}
        doc["function"] = function
        return doc


@dataclass(slots=True)
class _Sent:
    id: str
    named: bool = False
    arguments: int = 0  # characters of the arguments' text sent


class ToolCallReader:
    """One choice's text in the format of `parser` (one of PARSERS), read as it grows.

    `feed` returns what the new text adds: content (text that is no tool call) and call deltas.
    `parallel=False` passes on the first call only (OpenAI's `parallel_tool_calls`)."""

    def __init__(self, parser: str, *, parallel: bool = True) -> None:
        if parser not in PARSERS:
            raise ValueError(f"tool-call parser {parser!r}, must be one of {PARSERS}")
        self._mistral = parser == "mistral"
        self._parallel = parallel
        self._text = ""
        self._content_sent = 0  # characters of the text passed on as content
        self._plain = False  # the text is content only (Llama 3: it did not start with a call)
        self._token_at = 0  # where the content before the calls ends (Mistral's token)
        self._start: int | None = None  # where the calls' text starts, once seen
        self._end: int | None = None  # where it ended, once it has
        self._failed = False  # the calls' text stopped being JSON: the rest is content
        self._calls: list[Call] = []
        self._progress: Progress = {}  # the scanner's, kept from one read to the next
        self._sent: list[_Sent] = []

    @property
    def called(self) -> bool:
        """The model made a call (its name was passed on)."""
        return any(s.named for s in self._sent)

    @property
    def whole(self) -> bool:
        """Every call's text is complete (or there is none), none of it malformed."""
        if self._failed:
            return False
        if self._start is None or self._end is not None:
            return True
        # Llama 3's calls have no closing bracket: the text may end after a whole call.
        return not self._mistral and bool(self._calls) and all(c.whole for c in self._calls)

    def feed(self, delta: str) -> tuple[str, list[ToolCallDelta]]:
        self._text += delta
        if self._plain:
            return self._content(len(self._text)), []
        if self._start is None:
            self._start = self._find_start()
            if self._start is None:
                upto = len(self._text) if self._plain else len(self._text) - self._held()
                return self._content(upto), []
        content = self._content(self._token_at)
        self._content_sent = max(self._content_sent, self._start)
        if self._failed or self._end is not None:
            return content + self._content(len(self._text)), []
        if self._calls and self._calls[-1].in_string and not _STRING_END.search(delta):
            # Still inside a string of the last call's arguments: the read would be the last
            # one with `delta` added to them, so it is made so, not read again from the start.
            self._calls[-1].arguments += delta
            return content, self._deltas(self._calls)
        try:
            read = self._read(self._text[self._start :])
        except Malformed:
            self._failed = True
            if self.called:  # what was sent stands; what follows is content
                self._content_sent = len(self._text)
                return content, []
            self._content_sent = self._token_at  # nothing was a call: all of it is content
            return content + self._content(len(self._text)), []
        self._calls = read.calls
        deltas = self._deltas(read.calls)
        if read.end is not None:
            self._end = self._start + read.end
            if not self.called:  # calls' text that named no call is content after all
                content += self._text[self._token_at : self._end]
            self._content_sent = self._end
            content += self._content(len(self._text))
        return content, deltas

    def finish(self) -> str:
        """The content still held at the text's end: a tail that might have begun a call, or
        calls' text that named no call."""
        if self._start is None or self._failed or self._end is not None:
            return self._content(len(self._text))
        if self.called:
            return ""
        self._content_sent = len(self._text)
        return self._text[self._token_at :]

    def _read(self, text: str) -> Read:
        if not self._mistral and text.startswith(_LLAMA_TOKEN):
            text = text[len(_LLAMA_TOKEN) :]
            read = llama_calls(text, self._progress)
            if read.end is not None:
                read.end += len(_LLAMA_TOKEN)
            return read
        if self._mistral:
            return mistral_calls(text, self._progress)
        return llama_calls(text, self._progress)

    def _find_start(self) -> int | None:
        """Where the calls' text starts (and `_token_at`, where the content before it ends)."""
        text = self._text
        first = skip_whitespace(text, 0)
        if self._mistral:
            # only where the token may begin: what was sent as content holds none
            at = text.find(_MISTRAL_TOKEN, max(0, self._content_sent - len(_MISTRAL_TOKEN)))
            if at >= 0:
                self._token_at = at
                return at + len(_MISTRAL_TOKEN)
            if first < len(text) and text[first] == "[":
                if _MISTRAL_TOKEN.startswith(text[first:]):
                    return None  # perhaps the token, still arriving
                self._token_at = first
                return first
            return None
        if first == len(text) or _LLAMA_TOKEN.startswith(text[first:]):
            return None  # whitespace, or perhaps the python tag, still arriving
        if text[first] == "{" or text.startswith(_LLAMA_TOKEN, first):
            self._token_at = first
            return first
        self._plain = True
        return None

    def _held(self) -> int:
        """How much of the text's end to hold back: what may begin the calls' text."""
        text = self._text
        if not self._mistral:
            return len(text)  # undecided: whitespace, or a start of the python tag
        for size in range(min(len(text), len(_MISTRAL_TOKEN) - 1), 0, -1):
            if _MISTRAL_TOKEN.startswith(text[-size:]):
                return size
        return 0

    def _content(self, upto: int) -> str:
        if upto <= self._content_sent:
            return ""
        content = self._text[self._content_sent : upto]
        self._content_sent = upto
        return content

    def _deltas(self, calls: list[Call]) -> list[ToolCallDelta]:
        deltas = []
        for index, call in enumerate(calls if self._parallel else calls[:1]):
            if index == len(self._sent):
                self._sent.append(_Sent(id=self._new_id()))
            sent = self._sent[index]
            if not sent.named:
                if call.name is None:
                    break  # calls are named in order
                sent.named = True
                more = self._more(call, sent)
                deltas.append(ToolCallDelta(index, more, id=sent.id, name=call.name))
            elif more := self._more(call, sent):
                deltas.append(ToolCallDelta(index, more))
        return deltas

    def _more(self, call: Call, sent: _Sent) -> str:
        """The arguments' text not yet sent: streamed as it comes when it is an object's text,
        else (a quoted object) once it is whole; `{}` for a whole call without arguments."""
        text = call.arguments
        if call.whole and not text:
            text = "{}"
        elif not call.arguments_whole and not text.startswith("{"):
            return ""
        more = text[sent.arguments :]
        sent.arguments = len(text)
        return more

    def _new_id(self) -> str:
        if self._mistral:  # Mistral's ids: 9 letters and digits (its chat template checks)
            return "".join(random.choices(_ALNUM, k=9))
        return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True, slots=True)
class WholeAnswer:
    """A whole answer read for calls: its content (None when it is only calls) and calls."""

    content: str | None
    calls: tuple[ToolCall, ...] = ()


def read_whole(text: str, parser: str, *, parallel: bool = True) -> WholeAnswer:
    """The calls in a model's whole answer; text that is not whole calls is all content."""
    reader = ToolCallReader(parser, parallel=parallel)
    content, deltas = reader.feed(text)
    content += reader.finish()
    if not reader.called or not reader.whole:
        return WholeAnswer(text)
    ids: dict[int, str] = {}
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    for delta in deltas:
        if delta.name is not None and delta.id is not None:
            ids[delta.index], names[delta.index] = delta.id, delta.name
        arguments[delta.index] = arguments.get(delta.index, "") + delta.arguments
    calls = tuple(ToolCall(ids[i], names[i], arguments[i]) for i in sorted(names))
    return WholeAnswer(content or None, calls)
