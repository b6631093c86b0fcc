"""Fuzz the tool-call readers on any model output: Mistral's and Llama 3's formats, whole and
streamed in any pieces (runtime.openai.tool_parsers over tool_call_scan), and a choice's answer
through tool_calls (whole_message, ToolStream with its parse limit).

The text is built from the formats' own pieces (tokens, brackets, quotes, escapes JSON lacks,
keys, whole calls) or is any text at all. Property: reading never raises (text that is no
call is content), never hangs; the calls read from a whole answer have a name and arguments
that are a JSON object's text; the same text streamed in any pieces makes the same calls and
the same content; every answer and chunk is JSON the client can read.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import strategies as st

from runtime.openai.tool_calls import ToolStream, whole_message
from runtime.openai.tool_parsers import PARSERS, ToolCallReader, read_whole
from runtime.openai.tool_schema import ToolRequest
from tests.fuzz.targets import fuzz_target

_PIECES = st.sampled_from(
    ["[TOOL_CALLS]", "<|python_tag|>", "[", "]", "{", "}", '"', "\\", ",", ":", ";", " ", "\n",
     '"name"', '"arguments"', '"parameters"', '"f"', '"g"', '""', "1", "-", "1e999", "NaN", "null",
     "true", "\\x", '"\\q"', '"\\u12"', '"\\ud800"', "abc", "{}", '"{\\"a\\": 1}"', "[TOOL",
     "<|python", '{"name": "f", "arguments": {"a": [1, {"b": null}]}}',
     '{"name": "g", "parameters": "{\\"x\\": 2}"}', "[" * 50, "{" * 50]
)  # fmt: skip
_KEYS = st.sampled_from(
    ['"name"', '"arguments"', '"parameters"', '"x"', '""', '"\\q"', '"\\ud800"', '"na\\u006de"',
     "name", "1", '"name" "name"']
)  # fmt: skip
_VALUES = st.sampled_from(
    ['"f"', '"g"', '""', '"\\x"', '"\\ud800"', "{}", '{"a": 1}', '"{\\"a\\": 1}"', '"[1]"',
     "[1, 2]", '{"a": "\\q"}', "1e999", "-", "NaN", "null", "true", "tru", "[" * 40 + "]" * 40,
     "{" * 3]
)  # fmt: skip


@st.composite
def _calls_text(draw: st.DrawFn) -> str:
    """Text shaped like the formats' calls: a prefix, calls of keys and values, a tail."""
    calls = []
    for _ in range(draw(st.integers(0, 3))):
        members = draw(st.lists(st.tuples(_KEYS, _VALUES), max_size=3))
        calls.append("{" + ", ".join(f"{k}: {v}" for k, v in members) + "}")
    joined = draw(st.sampled_from([", ", "; ", ""])).join(calls)
    if draw(st.booleans()):
        joined = f"[{joined}]"
    prefix = draw(st.sampled_from(["", "[TOOL_CALLS]", "<|python_tag|>", "hi ", " \n"]))
    text = prefix + joined + draw(st.sampled_from(["", " tail", "]", "}", ";"]))
    return text[: draw(st.integers(0, len(text)))] if draw(st.booleans()) else text


texts = _calls_text() | st.lists(_PIECES, max_size=30).map("".join) | st.text(max_size=60)
_steps = st.lists(st.integers(1, 9), max_size=30)


def _streamed(
    parser: str, text: str, steps: list[int], *, parallel: bool
) -> tuple[str, dict[int, dict[str, Any]]]:
    """`text` fed in pieces of `steps` (then the rest): the content, the calls by index."""
    reader = ToolCallReader(parser, parallel=parallel)
    content, calls = "", {}
    cuts = [0]
    for step in steps:
        cuts.append(min(cuts[-1] + step, len(text)))
    cuts.append(len(text))
    for start, end in itertools.pairwise(cuts):
        more, deltas = reader.feed(text[start:end])
        content += more
        for delta in deltas:
            json.dumps(delta.to_json())
            call = calls.setdefault(delta.index, {"name": None, "arguments": ""})
            if delta.name is not None:
                assert call["name"] is None, "a call is named once"
                call["name"] = delta.name
            call["arguments"] += delta.arguments
    return content + reader.finish(), calls


@fuzz_target(texts, st.sampled_from(PARSERS), _steps, st.booleans())
def _read(text: str, parser: str, steps: list[int], parallel: bool) -> None:
    whole = read_whole(text, parser, parallel=parallel)
    for call in whole.calls:
        assert call.name and isinstance(json.loads(call.arguments), dict), call
    content, calls = _streamed(parser, text, steps, parallel=parallel)
    if not whole.calls:
        assert whole.content == text  # no call: all of it is content
        return
    assert [(c.name, c.arguments) for c in whole.calls] == [
        (calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)
    ]
    assert (whole.content or "") == content


test_tool_call_readers, test_tool_call_readers_long = _read

_TOOLS = (
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "g"}},
)
_REQUESTS = st.sampled_from(
    [
        ToolRequest(),
        ToolRequest(tools=_TOOLS),
        ToolRequest(tools=_TOOLS, choice="auto", parallel=False),
        ToolRequest(tools=_TOOLS, choice="required"),
        ToolRequest(tools=_TOOLS, named="g"),
    ]
)


@fuzz_target(texts, _REQUESTS, st.sampled_from([*PARSERS, None]), _steps, st.integers(1, 64))
def _answer(
    text: str, tools: ToolRequest, parser: str | None, steps: list[int], limit: int
) -> None:
    """A choice's text as its answer, whole and streamed (cut at `limit` parsed bytes)."""
    message = whole_message(text, tools, parser)
    json.dumps([message.content, message.tool_calls, message.finish_reason])
    stream = ToolStream(tools, parser, max_parse_bytes=limit)
    start = 0
    for step in [*steps, len(text)]:
        piece = text[start : start + step]
        start += step
        if stream.over_limit(piece):
            break
        out = stream.feed(piece)
        json.dumps([out.content, out.tool_calls])
    held, reason = stream.finish("stop")
    assert reason in ("stop", "tool_calls")
    json.dumps(held.content)


test_tool_call_answers, test_tool_call_answers_long = _answer
