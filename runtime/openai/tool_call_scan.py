"""A model's tool-call text, perhaps still being written, read as the calls so far (pure).

    mistral_calls   [{"name": ..., "arguments": {...}}, ...]        the array after the token
    llama_calls     {"name": ..., "arguments"|"parameters": {...}} [; {...}]...

A small scanner of JSON values, tolerant of a text that ends mid-value (`Read.end` stays None
until the calls' text has ended), strict about anything that will never be JSON (`Malformed`),
or never one call (a second name or arguments value).
It keeps no stack of Python frames per nesting level, so deep nesting cannot overflow it; a
whole arguments value is checked with the json module, whose RecursionError is Malformed too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

__all__ = [
    "Call",
    "Malformed",
    "Progress",
    "Read",
    "llama_calls",
    "mistral_calls",
    "skip_whitespace",
]

_ARGUMENT_KEYS = ("arguments", "parameters")
_WHITESPACE = " \t\r\n"
# What the scanner stops at, found by the re module rather than a Python loop per character:
# the streaming reader re-reads the calls' text at every delta, so its cost per read is the
# text's length, and a long string (arguments holding a document) must cost little per byte.
_IN_STRING = re.compile(r'["\\]')
_IN_CONTAINER = re.compile(r'["{}\[\]]')
_AFTER_SCALAR = re.compile(r"[,}\] \t\r\n]")


# Where the scan of an unfinished container or string stopped, by the index it starts at:
# (a container's closers, the index to go on from). The calls' text only grows as the model
# writes it, so a later read of the same text (with more after it) goes on from there, and a
# stream's reads cost about the length of what is new, not of everything so far.
Progress = dict[int, tuple[tuple[str, ...], int]]


class _Partial(Exception):
    """The text ends inside a JSON value: more is to come (`in_string`: inside a string)."""

    def __init__(self, *, in_string: bool = False) -> None:
        super().__init__()
        self.in_string = in_string


class Malformed(Exception):
    """The text is not JSON (of a tool call) and will not become it."""


@dataclass(slots=True)
class Call:
    """A call as far as its text goes: its name once whole, its arguments' text so far."""

    name: str | None = None
    arguments: str = ""
    arguments_whole: bool = False
    whole: bool = False
    # The text ends inside a string of the arguments: more text holding no quote and no
    # backslash only lengthens them (tool_parsers reads such a delta without a re-read).
    in_string: bool = False


def skip_whitespace(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WHITESPACE:
        i += 1
    return i


def _value_end(text: str, i: int, progress: Progress | None = None) -> int:
    """Where the JSON value starting at `text[i]` ends (an index past it); an unfinished
    container's scan goes on from where `progress` says it stopped, and is recorded there."""
    c = text[i]
    if c == '"':
        j = i + 1 if progress is None or i not in progress else progress[i][1]
        while (found := _IN_STRING.search(text, j)) is not None:
            j = found.start()
            if text[j] == '"':
                return j + 1
            j += 2  # a backslash and the character it escapes
        _stopped(progress, i, [], j)
        raise _Partial(in_string=True)
    if c in "{[":
        closers, j = ([], i) if progress is None or i not in progress else progress[i]
        closers = list(closers)
        while (found := _IN_CONTAINER.search(text, j)) is not None:
            j, c = found.start(), found.group()
            if c == '"':
                try:
                    j = _value_end(text, j, progress)
                except _Partial:
                    _stopped(progress, i, closers, j)  # go on from the string's start
                    raise
                continue
            if c in "{[":
                closers.append("}" if c == "{" else "]")
            else:
                if c != closers.pop():
                    raise Malformed
                if not closers:
                    return j + 1
            j += 1
        _stopped(progress, i, closers, len(text))
        raise _Partial
    found = _AFTER_SCALAR.search(text, i)
    if found is None:
        raise _Partial
    j = found.start()
    _loads(text[i:j])
    return j


def _stopped(progress: Progress | None, start: int, closers: list[str], at: int) -> None:
    if progress is not None:
        progress[start] = (tuple(closers), at)


def _loads(raw: str) -> object:
    """The JSON value `raw` is (a whole one: `_value_end` found its end), else Malformed: a
    string's bad escape is no JSON, and neither is nesting past the parser's depth."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise Malformed from None


def _call(text: str, i: int, progress: Progress | None) -> tuple[Call, int]:
    """The call whose object starts at `text[i]` ("{"), and where its text ends so far."""
    call = Call()
    seen: set[str] = set()  # "name", "arguments" (either key of them)
    j = i + 1
    while True:
        j = skip_whitespace(text, j)
        if j == len(text):
            return call, j
        if text[j] == "}":
            call.whole = True
            return call, j + 1
        if text[j] == ",":
            j += 1
            continue
        if text[j] != '"':
            raise Malformed
        try:
            key_end = _value_end(text, j, progress)
        except _Partial:
            return call, len(text)
        key = _loads(text[j:key_end])
        member = "arguments" if key in _ARGUMENT_KEYS else key
        if member in ("name", "arguments"):
            # A call has one name and one arguments value: a second (JSON keeps the last)
            # would change what a stream already sent of the first.
            if member in seen:
                raise Malformed
            seen.add(member)
        j = skip_whitespace(text, key_end)
        if j == len(text):
            return call, j
        if text[j] != ":":
            raise Malformed
        j = skip_whitespace(text, j + 1)
        if j == len(text):
            return call, j
        try:
            end = _value_end(text, j, progress)
        except _Partial as partial:
            if key in _ARGUMENT_KEYS:
                call.arguments, call.in_string = text[j:], partial.in_string
            return call, len(text)
        if key == "name":
            name = _loads(text[j:end])
            if not isinstance(name, str) or not name:
                raise Malformed
            call.name = name
        elif key in _ARGUMENT_KEYS:
            call.arguments, call.arguments_whole = _arguments(text[j:end]), True
        j = end


def _arguments(raw: str) -> str:
    """A whole arguments value as the text of a JSON object (a model may quote it)."""
    value = _loads(raw)
    if isinstance(value, str):  # quoted: the object's text is the string
        raw = value
        value = _loads(raw)
    if not isinstance(value, dict):
        raise Malformed
    return raw


@dataclass(slots=True)
class Read:
    calls: list[Call] = field(default_factory=list)
    end: int | None = None  # where the calls' text ended, once it has


def mistral_calls(text: str, progress: Progress | None = None) -> Read:
    read = Read()
    j = skip_whitespace(text, 0)
    if j == len(text):
        return read
    if text[j] != "[":
        raise Malformed
    j += 1
    while True:
        j = skip_whitespace(text, j)
        if j == len(text):
            return read
        if text[j] == "]":
            read.end = j + 1
            return read
        if text[j] == ",":
            j += 1
            continue
        if text[j] != "{":
            raise Malformed
        call, j = _call(text, j, progress)
        read.calls.append(call)
        if not call.whole:
            return read


def llama_calls(text: str, progress: Progress | None = None) -> Read:
    read = Read()
    j = 0
    while True:
        j = skip_whitespace(text, j)
        if j == len(text):
            return read
        if text[j] == ";" and read.calls:
            j += 1
            continue
        if text[j] != "{":
            if read.calls:
                read.end = j  # what follows the calls is content
                return read
            raise Malformed
        call, j = _call(text, j, progress)
        read.calls.append(call)
        if not call.whole:
            return read
