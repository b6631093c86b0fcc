"""Tool calling's pure parts: the request's tools and choice (runtime.openai.tool_schema), the
Mistral and Llama 3 readers fed piece by piece (tool_parsers), and a choice's answer, whole and
streamed, with the parse limit (tool_calls)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from runtime.openai.errors import OpenAIError
from runtime.openai.schema import parse_body, parse_chat
from runtime.openai.tool_calls import ToolStream, whole_message
from runtime.openai.tool_parsers import PARSERS, ToolCallReader, WholeAnswer, read_whole
from runtime.openai.tool_schema import ToolMode, ToolRequest, parse_tools
from thawwire.openai_api import TOOL_CALL_PARSERS

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
FORECAST = {"type": "function", "function": {"name": "forecast"}}
ARGS = '{"city": "Dallas", "state": "TX"}'
MISTRAL = f'[TOOL_CALLS][{{"name": "get_weather", "arguments": {ARGS}}}]'
LLAMA = f'<|python_tag|>{{"name": "get_weather", "parameters": {ARGS}}}'


def _fed(parser: str, text: str, step: int) -> tuple[str, dict[int, dict[str, Any]], bool]:
    """`text` fed `step` characters at a time: the content, the calls, whether it called."""
    reader = ToolCallReader(parser)
    content, calls = "", {}
    for i in range(0, len(text), step):
        more, deltas = reader.feed(text[i : i + step])
        content += more
        for delta in deltas:
            call = calls.setdefault(delta.index, {"name": None, "id": None, "arguments": ""})
            if delta.name is not None:
                assert call["name"] is None  # named once
                call["name"], call["id"] = delta.name, delta.id
            call["arguments"] += delta.arguments
    return content + reader.finish(), calls, reader.called


def test_the_parsers_are_the_flags_choices() -> None:
    assert PARSERS == TOOL_CALL_PARSERS == ("llama3", "mistral")


@pytest.mark.parametrize("step", [1, 3, 8, 1000])
@pytest.mark.parametrize(
    ("parser", "text"),
    [
        ("mistral", MISTRAL),
        ("mistral", f'[{{"name": "get_weather", "arguments": {ARGS}}}]'),  # no token
        ("llama3", LLAMA),
        ("llama3", f'{{"name": "get_weather", "arguments": {ARGS}}}'),  # no tag
    ],
)
def test_a_call_streamed_in_any_pieces_is_the_whole_answers(
    parser: str, text: str, step: int
) -> None:
    content, calls, called = _fed(parser, text, step)
    assert called and content == ""
    assert calls[0]["name"] == "get_weather" and calls[0]["arguments"] == ARGS
    whole = read_whole(text, parser)
    assert whole.content is None and [c.arguments for c in whole.calls] == [ARGS]
    assert whole.calls[0].to_json()["type"] == "function"


def test_ids_are_mistrals_nine_alphanumerics_or_call_ids() -> None:
    (mistral,) = read_whole(MISTRAL, "mistral").calls
    (llama,) = read_whole(LLAMA, "llama3").calls
    assert len(mistral.id) == 9 and mistral.id.isalnum()
    assert llama.id.startswith("call_")


@pytest.mark.parametrize("step", [1, 5, 1000])
def test_several_calls_and_the_text_around_them(step: int) -> None:
    text = (
        'Let me look. [TOOL_CALLS][{"name": "a", "arguments": {"x": [1, "]}"]}}, '
        '{"name": "b", "arguments": {}}] Done.'
    )
    content, calls, _ = _fed("mistral", text, step)
    assert content == "Let me look.  Done."
    assert [(c["name"], c["arguments"]) for c in calls.values()] == [
        ("a", '{"x": [1, "]}"]}'),
        ("b", "{}"),
    ]
    llama = '{"name": "a", "parameters": {"x": 1}}; {"name": "b", "arguments": "{\\"y\\": 2}"}'
    content, calls, _ = _fed("llama3", llama, step)
    assert content == "" and [c["arguments"] for c in calls.values()] == ['{"x": 1}', '{"y": 2}']


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    text = '[TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]'
    assert [c.name for c in read_whole(text, "mistral", parallel=False).calls] == ["a"]


@pytest.mark.parametrize("step", [1, 4, 1000])
@pytest.mark.parametrize(
    ("parser", "text"),
    [
        ("mistral", "[TOOL_CALLS] not json at all"),
        ("mistral", '[TOOL_CALLS][{"name": oops'),
        ("mistral", "[1, 2, 3]"),
        ("mistral", "[]"),
        ("mistral", "plain text, [with brackets]"),
        ("llama3", '{"not": "a call"}'),
        ("llama3", "  The answer is {42}."),
        ("llama3", "<|python_tag|>print(1)"),
        ("llama3", ""),
    ],
)
def test_text_that_is_no_call_is_content(parser: str, text: str, step: int) -> None:
    assert read_whole(text, parser).content == text
    assert not read_whole(text, parser).calls
    content, calls, called = _fed(parser, text, step)
    assert (content, calls, called) == (text, {}, False)


def test_a_call_cut_off_mid_json_is_content_when_whole() -> None:
    text = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Dal'
    assert read_whole(text, "mistral").content == text
    # streamed, what was recognised was sent: the name and the arguments so far
    content, calls, called = _fed("mistral", text, 4)
    assert called and content == "" and calls[0]["arguments"] == '{"city": "Dal'
    # arguments that are no object: content when whole; streamed, the name was already sent
    text = '[TOOL_CALLS][{"name": "a", "arguments": 5}]'
    assert read_whole(text, "mistral").content == text
    content, calls, called = _fed("mistral", text, 1)
    assert called and calls[0]["arguments"] == ""


def test_the_request_modes_as_tritons_frontend_decides_them() -> None:
    assert parse_tools({}).mode is ToolMode.PLAIN
    assert parse_tools({"tools": [WEATHER]}).mode is ToolMode.PARSED
    assert parse_tools({"tools": [WEATHER], "tool_choice": "auto"}).mode is ToolMode.PARSED
    assert parse_tools({"tools": [WEATHER], "tool_choice": "none"}).mode is ToolMode.PLAIN
    required = parse_tools({"tools": [WEATHER, FORECAST], "tool_choice": "required"})
    assert (required.mode, required.name) == (ToolMode.NAMED, "get_weather")
    named = {"type": "function", "function": {"name": "forecast"}}
    chosen = parse_tools({"tools": [WEATHER, FORECAST], "tool_choice": named})
    assert (chosen.mode, chosen.name) == (ToolMode.NAMED, "forecast")
    assert parse_tools({"tools": [WEATHER], "parallel_tool_calls": False}).parallel is False


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"tool_choice": "required", "tools": []}, '"required" tool choice requires'),
        (
            {"tool_choice": {"type": "function", "function": {"name": "forecast"}}},
            "Named tool choice requires CreateChatCompletionRequest.tools to be provided",
        ),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "Tool 'x' has not been passed in `tools`.",
        ),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "'tool_choice' must be one of"),
        ({"tools": [WEATHER], "tool_choice": {"name": "x"}}, "'tool_choice' as an object"),
        ({"tools": {"a": 1}}, "'tools' must be a list"),
        ({"tools": [{"type": "code"}]}, "tools[0] must be an object of type 'function'"),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "function.name"),
        ({"tools": [WEATHER, WEATHER]}, "names a function twice"),
        ({"tools": [WEATHER] * 129}, "more than 128"),
        ({"tools": [{**WEATHER, "function": {"name": "f", "parameters": 3}}]}, "parameters"),
        ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"functions": [{"name": "f"}]}, "'functions' (deprecated)"),
    ],
)
def test_inconsistent_or_malformed_tools_are_refused(body: dict[str, Any], words: str) -> None:
    with pytest.raises(OpenAIError) as caught:
        parse_tools(body)
    assert words in caught.value.message and caught.value.status == 400


def test_without_a_parser_tools_are_refused_in_tritons_words() -> None:
    with pytest.raises(OpenAIError, match="having tools in the request requires --tool-call"):
        parse_tools({"tools": [WEATHER]}).check_parser(None)
    with pytest.raises(OpenAIError, match='"auto" tool choice requires --tool-call-parser'):
        parse_tools({"tools": [WEATHER], "tool_choice": "auto"}).check_parser(None)
    for body in ({"tools": [WEATHER], "tool_choice": "none"}, {"tool_choice": "none"}, {}):
        parse_tools(body).check_parser(None)  # no parser needed
    parse_tools({"tools": [WEATHER]}).check_parser("mistral")


def test_a_conversation_with_calls_and_a_tools_answer() -> None:
    call = {
        "id": "123456789",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ARGS},
    }
    asked = parse_chat(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "123456789", "content": "98"},
            ],
            "tools": [WEATHER],
        }
    )
    assistant, tool = asked.messages[1].to_template(), asked.messages[2].to_template()
    # templates take the arguments as an object (transformers' convention)
    assert assistant["tool_calls"][0]["function"]["arguments"] == json.loads(ARGS)
    assert tool == {"role": "tool", "content": "98", "tool_call_id": "123456789"}
    bad_arguments = {**call, "function": {"name": "get_weather", "arguments": "{oops"}}
    for messages in (
        [{"role": "assistant", "tool_calls": [bad_arguments]}],
        [{"role": "user", "content": "x", "tool_calls": [call]}],
        [{"role": "tool", "content": "98"}],
    ):
        with pytest.raises(OpenAIError):
            parse_chat({"model": "m", "messages": messages})


def test_whole_messages_by_mode() -> None:
    parsed = whole_message(MISTRAL, parse_tools({"tools": [WEATHER]}), "mistral")
    assert parsed.finish_reason == "tool_calls" and parsed.content is None
    assert parsed.tool_calls and parsed.tool_calls[0]["function"]["arguments"] == ARGS
    plain = whole_message("hello", parse_tools({"tools": [WEATHER]}), "mistral")
    assert (plain.content, plain.tool_calls, plain.finish_reason) == ("hello", None, None)
    named = whole_message(ARGS, parse_tools({"tools": [WEATHER], "tool_choice": "required"}), None)
    assert named.finish_reason is None and named.tool_calls
    assert named.tool_calls[0]["function"] == {"name": "get_weather", "arguments": ARGS}


def test_a_stream_counts_the_parsed_bytes_only_with_a_parser() -> None:
    tools = parse_tools({"tools": [WEATHER]})
    stream = ToolStream(tools, "mistral", max_parse_bytes=10)
    assert not stream.over_limit("é" * 5)  # 10 bytes
    assert stream.over_limit("x")
    plain = ToolStream(ToolRequest(), "mistral", max_parse_bytes=10)
    assert plain.passthrough and not plain.over_limit("x" * 100)


def test_a_named_stream_sends_the_name_once_then_arguments() -> None:
    tools = parse_tools({"tools": [WEATHER], "tool_choice": "required"})
    stream = ToolStream(tools, None, max_parse_bytes=10)
    first, second = stream.feed('{"a"'), stream.feed(": 1}")
    assert first.tool_calls[0]["function"] == {"name": "get_weather", "arguments": '{"a"'}
    assert first.tool_calls[0]["id"].startswith("call_")
    assert second.tool_calls == [{"index": 0, "function": {"arguments": ": 1}"}}]
    assert stream.finish("stop") == (stream.finish("stop")[0], "stop")


def test_arguments_nested_past_the_json_parsers_depth_are_content() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    text = f'[TOOL_CALLS][{{"name": "a", "arguments": {{"x": {deep}}}}}]'
    assert read_whole(text, "mistral").content == text
    call = {"id": "1", "type": "function", "function": {"name": "a", "arguments": deep}}
    with pytest.raises(OpenAIError, match="must be a JSON object"):
        parse_chat({"model": "m", "messages": [{"role": "assistant", "tool_calls": [call]}]})


def test_a_long_plain_answer_is_content_in_any_pieces() -> None:
    text = "word [bracket] " * 2000 + "[TOOL"
    content, calls, called = _fed("mistral", text, 7)
    assert (content, calls, called) == (text, {}, False)


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize(
    "calls",
    [
        '{"\\q"',  # a key with an escape JSON lacks (found by fuzzing: `{"\q"`, llama3)
        '{"name": "\\x", "arguments": {}}',  # the name's
        '{"name": ' + "[" * 100_000 + "]" * 100_000 + "}",  # a name nested past the parser
    ],
    ids=["bad-key-escape", "bad-name-escape", "deep-name"],
)
def test_call_text_json_cannot_read_is_content_not_an_error(parser: str, calls: str) -> None:
    """The scanner found where a key, or the name, ends, then the json module refused it: a
    JSONDecodeError (or RecursionError) left the reader, a 500 for the whole answer."""
    text = f"[TOOL_CALLS][{calls}]" if parser == "mistral" else calls
    assert read_whole(text, parser).content == text
    # (each feed re-reads the text from its start: the deep one is streamed in big pieces)
    for step in (1, 5) if len(text) < 100 else (50_000,):
        content, found, called = _fed(parser, text, step)
        assert (content, found, called) == (text, {}, False)


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        # found by fuzzing: a template that prints the values made a prompt UTF-8 cannot hold
        ('{"a": "\\ud800"}', "lone surrogate"),
        ('{"\\udfff": 1}', "lone surrogate"),
        # found by fuzzing (980 levels): parsed in a shallow frame, a template's `tojson`
        # overflowed in a deeper one (how deep each is depends on the caller's stack)
        ('{"a": ' + "[" * 500 + "]" * 500 + "}", "nested deeper than 32 levels"),
        ('{"a": ' + "[" * 33 + "]" * 33 + "}", "nested deeper than 32 levels"),
    ],
    ids=["surrogate-value", "surrogate-key", "500-deep", "33-deep"],
)
def test_an_earlier_calls_arguments_follow_the_bodys_own_rules(arguments: str, words: str) -> None:
    """The body may hold no lone surrogate and no nesting past 32 levels; an earlier call's
    `arguments`, JSON carried as text, could, and reached the chat template as objects: a
    UnicodeEncodeError sending the prompt, a RecursionError rendering it (500s)."""
    call = {"id": "1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [call]}]
    body = json.dumps({"model": "m", "messages": messages}).encode()
    with pytest.raises(OpenAIError, match=words) as refused:
        parse_chat(parse_body(body))
    assert refused.value.status == 400
    assert refused.value.param == "messages[1].tool_calls[0]"
    assert "messages[1].tool_calls[0].function.arguments" in refused.value.message


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize(
    "calls",
    [
        '{"name": "f", "name": "g"}',  # found by fuzzing (llama3)
        '{"name": "f", "arguments": {}, "parameters": {"a": 1}}',
        '{"name": "f", "arguments": {"a": 1}, "arguments": {"b": 2}}',
    ],
    ids=["two-names", "arguments-and-parameters", "two-arguments"],
)
def test_a_call_naming_its_function_or_arguments_twice_is_no_call(parser: str, calls: str) -> None:
    """JSON keeps a key's last value; a stream had already sent the first: the streamed call
    was `f` where the whole answer's was `g`, and the streamed arguments joined were
    `{}"a": 1}` (no JSON) where the whole answer's were `{"a": 1}`. Such a call is malformed:
    the whole answer is content, and no stream sends a second name or more arguments."""
    text = f"[TOOL_CALLS][{calls}]" if parser == "mistral" else calls
    assert read_whole(text, parser) == WholeAnswer(text)  # all content, no call
    for step in (1, 3, len(text)):
        _, found, _ = _fed(parser, text, step)
        for call in found.values():  # what was sent before the second key came stands
            assert call["name"] == "f" and call["arguments"] in ("", "{}", '{"a": 1}'), found


@pytest.mark.parametrize(
    "value",
    [
        "x" * (32 << 10),  # one long string
        ["xy"] * ((32 << 10) // 6),  # many short strings
        [[1]] * ((32 << 10) // 5),  # many small containers
        "\\" * (16 << 10),  # escapes (a backslash each, 32 KiB as JSON text)
    ],
    ids=["long-string", "short-strings", "small-lists", "escapes"],
)
def test_a_long_streamed_argument_costs_little_per_delta(value: Any) -> None:
    """Each delta read the calls' text again from its start, one Python step per character:
    32 KiB of arguments streamed four characters at a time took 11-16 s on the event loop,
    120 KiB (under the default parse limit) minutes (found writing the regression test for a
    name nested 100,000 deep, which timed out streamed a character at a time). A read now goes
    on where the last one stopped: ~0.1 s each. The bound is loose for a loaded CI."""
    arguments = json.dumps({"a": value})
    text = f'[TOOL_CALLS][{{"name": "f", "arguments": {arguments}}}]'
    started = time.perf_counter()
    content, calls, called = _fed("mistral", text, 4)
    assert time.perf_counter() - started < 3.0
    assert (content, called, calls[0]["arguments"]) == ("", True, arguments)
