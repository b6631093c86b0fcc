"""Tool calling through the `openai` client, unchanged, against a real `thaw serve` with
`--tool-call-parser`: a streamed Mistral-format call and a Llama 3 JSON call become OpenAI's
`tool_calls`, streamed and whole alike; a tool's answer goes back into the conversation; named
and required tool choices, and the tool's JSON schema they send the model (guided decoding, a
TRT-LLM-style and a vLLM-style model); the streamed parse limit; refusals in Triton's words."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.fixtures import openai_models, tool_call_models
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

LIMIT_BYTES = 512
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "state": {"type": "string"}},
            "required": ["city", "state"],
        },
    },
}
FORECAST_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {"name": "get_n_day_weather_forecast", "parameters": {"type": "object"}},
}
ASKING = [{"role": "user", "content": "What is the weather in Dallas, Texas in Fahrenheit?"}]
WITH_TOOL_ANSWER = [
    *ASKING,
    {
        "role": "assistant",
        "tool_calls": [
            {
                "id": "123456789",
                "type": "function",
                "function": {
                    "name": "get_current_weather",
                    "arguments": '{"city": "Dallas", "state": "TX", "unit": "fahrenheit"}',
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "123456789", "content": "98"},
]
DALLAS = {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}


def _server(repo_factory: pytest.TempPathFactory, parser: str, *args: str) -> ServeProcess:
    repo = repo_factory.mktemp(f"tools_{parser}")
    tool_call_models.make_tool_stream_mistral(repo)
    tool_call_models.make_tool_answer_llama(repo)
    openai_models.make_params_vllm(repo)
    serve = ServeProcess(repo, "--tool-call-parser", parser, *args)
    serve.wait_ready()
    return serve


@pytest.fixture(scope="module")
def mistral(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    serve = _server(tmp_path_factory, "mistral", "--max-tool-call-parse-bytes", str(LIMIT_BYTES))
    yield serve
    serve.stop()


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    serve = _server(tmp_path_factory, "llama3")
    yield serve
    serve.stop()


def _client(server: ServeProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def _streamed(stream: Any) -> tuple[str, dict[int, dict[str, Any]], list[str], int]:
    """A stream's content, its calls by index (id, name, arguments joined), its finish
    reasons, and how many chunks named the role."""
    content, calls, reasons, roles = "", {}, [], 0
    for chunk in stream:
        choice = chunk.choices[0]
        roles += choice.delta.role == "assistant"
        content += choice.delta.content or ""
        for delta in choice.delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": None, "name": None, "arguments": ""})
            if delta.id:
                assert call["id"] is None, "a call's id is streamed once"
                call["id"] = delta.id
            if delta.function and delta.function.name:
                assert call["name"] is None, "a call's name is streamed once, whole"
                call["name"] = delta.function.name
            if delta.function and delta.function.arguments:
                call["arguments"] += delta.function.arguments
        if choice.finish_reason:
            reasons.append(choice.finish_reason)
    return content, calls, reasons, roles


@pytest.mark.parametrize("model", ["tool_stream_mistral"])
def test_a_mistral_call_streamed_and_whole(mistral: ServeProcess, model: str) -> None:
    with _client(mistral) as client:
        whole = client.chat.completions.create(model=model, messages=ASKING, tools=[WEATHER_TOOL])
        choice = whole.choices[0]
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls or []
        assert call.type == "function" and len(call.id) >= 9
        assert call.function.name == "get_current_weather"
        assert json.loads(call.function.arguments) == DALLAS
        stream = client.chat.completions.create(
            model=model, messages=ASKING, tools=[WEATHER_TOOL], stream=True
        )
        content, calls, reasons, roles = _streamed(stream)
    assert (content, reasons, roles) == ("", ["tool_calls"], 1)
    assert calls[0]["name"] == "get_current_weather" and len(calls[0]["id"]) >= 9
    # the streamed arguments, joined, are the whole answer's text of them
    assert calls[0]["arguments"] == call.function.arguments


def test_a_llama3_call_streamed_and_whole(llama: ServeProcess) -> None:
    with _client(llama) as client:
        whole = client.chat.completions.create(
            model="tool_answer_llama", messages=ASKING, tools=[WEATHER_TOOL]
        )
        stream = client.chat.completions.create(
            model="tool_answer_llama", messages=ASKING, tools=[WEATHER_TOOL], stream=True
        )
        content, calls, reasons, _ = _streamed(stream)
        plain = client.chat.completions.create(
            model="tool_answer_llama",
            messages=[{"role": "user", "content": "plain-answer"}],
            tools=[WEATHER_TOOL],
        )
    (call,) = whole.choices[0].message.tool_calls or []
    assert whole.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_current_weather"
    assert json.loads(call.function.arguments) == DALLAS
    assert (content, reasons) == ("", ["tool_calls"])
    assert json.loads(calls[0]["arguments"]) == DALLAS
    assert plain.choices[0].message.content == "No tool needed."
    assert plain.choices[0].finish_reason == "stop" and not plain.choices[0].message.tool_calls


def test_a_tools_answer_goes_back_into_the_conversation(mistral: ServeProcess) -> None:
    with _client(mistral) as client:
        tools = [WEATHER_TOOL, FORECAST_TOOL]
        whole = client.chat.completions.create(
            model="tool_stream_mistral", messages=WITH_TOOL_ANSWER, tools=tools
        )
        stream = client.chat.completions.create(
            model="tool_stream_mistral", messages=WITH_TOOL_ANSWER, tools=tools, stream=True
        )
        content, calls, reasons, roles = _streamed(stream)
    choice = whole.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert choice.message.content == "It is 98 degrees in Dallas."
    assert (content, calls, reasons, roles) == (choice.message.content, {}, ["stop"], 1)


def test_the_tools_reach_the_chat_template(mistral: ServeProcess) -> None:
    with _client(mistral) as client:
        whole = client.chat.completions.create(
            model="tool_stream_mistral",
            messages=[*WITH_TOOL_ANSWER[:2], {"role": "user", "content": "show-prompt"}],
            tools=[WEATHER_TOOL, FORECAST_TOOL],
            tool_choice="none",
        )
    assert whole.choices[0].message.content == (
        "[AVAILABLE_TOOLS]get_current_weather;get_n_day_weather_forecast;[/AVAILABLE_TOOLS]"
        "<user>What is the weather in Dallas, Texas in Fahrenheit?"
        "[TOOL_CALLS]get_current_weather(Dallas)<user>show-prompt"
    )


def test_named_and_required_tool_choices(mistral: ServeProcess) -> None:
    asking = [{"role": "user", "content": "named-args"}]
    named = {"type": "function", "function": {"name": "get_n_day_weather_forecast"}}
    with _client(mistral) as client:
        # "required" calls the first tool, as Triton's frontend does
        choices = ((named, "get_n_day_weather_forecast"), ("required", "get_current_weather"))
        for choice, name in choices:
            kwargs: dict[str, Any] = {"tools": [WEATHER_TOOL, FORECAST_TOOL], "tool_choice": choice}
            whole = client.chat.completions.create(
                model="tool_stream_mistral", messages=asking, **kwargs
            )
            (call,) = whole.choices[0].message.tool_calls or []
            assert whole.choices[0].finish_reason != "tool_calls"
            assert call.function.name == name
            assert json.loads(call.function.arguments) == {**DALLAS, "num_days": 3}
            stream = client.chat.completions.create(
                model="tool_stream_mistral", messages=asking, stream=True, **kwargs
            )
            content, calls, reasons, _ = _streamed(stream)
            assert len(calls) == 1 and calls[0]["name"] == name and calls[0]["id"]
            assert calls[0]["arguments"] == call.function.arguments
            assert content == "" and len(reasons) == 1 and reasons[0] != "tool_calls"


def _compact(schema: dict[str, Any]) -> str:
    return json.dumps(schema, separators=(",", ":"))  # as Triton's frontend writes it


def test_a_named_or_required_choice_sends_the_tools_schema_as_the_guide(
    mistral: ServeProcess,
) -> None:
    asking = [{"role": "user", "content": "show-guide"}]
    named = {"type": "function", "function": {"name": "get_n_day_weather_forecast"}}
    tools = [WEATHER_TOOL, FORECAST_TOOL]
    with _client(mistral) as client:
        cases = ((named, FORECAST_TOOL), ("required", WEATHER_TOOL))
        for choice, tool in cases:
            whole = client.chat.completions.create(
                model="tool_stream_mistral", messages=asking, tools=tools, tool_choice=choice
            )
            (call,) = whole.choices[0].message.tool_calls or []
            # the model answers what it was given: the guide is the call's arguments
            guide = {"guide_type": "json_schema", "guide": _compact(tool["function"]["parameters"])}
            assert json.loads(call.function.arguments) == guide
            stream = client.chat.completions.create(
                model="tool_stream_mistral",
                messages=asking,
                tools=tools,
                tool_choice=choice,
                stream=True,
            )
            _, calls, _, _ = _streamed(stream)
            assert calls[0]["arguments"] == call.function.arguments
        # "auto" (the parser reads the text) and "none" are not guided
        for choice in ("auto", "none"):
            text = client.chat.completions.create(
                model="tool_stream_mistral", messages=asking, tools=tools, tool_choice=choice
            )
            message = text.choices[0].message
            assert not message.tool_calls
            assert json.loads(message.content or "") == {"guide_type": None, "guide": None}
        # a vLLM-style model: sampling_parameters' structured_outputs, as vllm_backend reads it
        vllm = client.chat.completions.create(
            model="params_vllm", messages=asking, tools=tools, tool_choice=named
        )
    (call,) = vllm.choices[0].message.tool_calls or []
    sampling = json.loads(call.function.arguments)["sampling_parameters"]
    assert json.loads(sampling["structured_outputs"]) == {"json": '{"type":"object"}'}


def test_malformed_tool_json_is_content(mistral: ServeProcess) -> None:
    asking = [{"role": "user", "content": "broken-call"}]
    with _client(mistral) as client:
        whole = client.chat.completions.create(
            model="tool_stream_mistral", messages=asking, tools=[WEATHER_TOOL]
        )
        stream = client.chat.completions.create(
            model="tool_stream_mistral", messages=asking, tools=[WEATHER_TOOL], stream=True
        )
        content, calls, reasons, _ = _streamed(stream)
    assert whole.choices[0].message.content == '[TOOL_CALLS][{"name": oops'
    assert whole.choices[0].finish_reason == "stop" and not whole.choices[0].message.tool_calls
    assert (content, calls, reasons) == ('[TOOL_CALLS][{"name": oops', {}, ["stop"])


def _raw_stream(server: ServeProcess, content: str, *, tools: bool) -> tuple[list[str], str]:
    """Triton's TestStreamingToolParseLimit's reading of a stream: finish reasons, and the
    content and arguments text."""
    body: dict[str, Any] = {
        "model": "tool_stream_mistral",
        "messages": [{"role": "user", "content": content}],
        "stream": True,
        "max_completion_tokens": 4096,
    }
    if tools:
        body["tools"] = [WEATHER_TOOL]
    reasons, text = [], ""
    request = urllib.request.Request(
        server.url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as r:
        assert r.status == 200
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[6:])["choices"][0]
            if choice.get("finish_reason"):
                reasons.append(choice["finish_reason"])
            delta = choice.get("delta") or {}
            text += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                text += (call.get("function") or {}).get("arguments") or ""
    return reasons, text


def test_a_streamed_call_past_the_parse_limit_is_cut(mistral: ServeProcess) -> None:
    reasons, text = _raw_stream(mistral, "big-tool-args", tools=True)
    assert reasons[-1] == "length" and len(text) <= LIMIT_BYTES
    reasons, _ = _raw_stream(mistral, "small tool call", tools=True)
    assert reasons == ["tool_calls"]
    # without tools nothing is parsed, so nothing is cut
    reasons, text = _raw_stream(mistral, "big-tool-args", tools=False)
    assert "length" not in reasons and len(text) > LIMIT_BYTES
    # the server goes on answering
    assert _raw_stream(mistral, "small tool call", tools=True)[0] == ["tool_calls"]


def test_inconsistent_tool_choice_and_tools_are_refused(mistral: ServeProcess) -> None:
    named = {"type": "function", "function": {"name": "get_n_day_weather_forecast"}}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"tool_choice": named}, "Named tool choice requires"),
        ({"tool_choice": named, "tools": [WEATHER_TOOL]}, "has not been passed in `tools`"),
        ({"tool_choice": "required", "tools": []}, '"required" tool choice requires'),
        ({"tools": [{"type": "function"}]}, "tools[0].function must be an object"),
    ]
    with _client(mistral) as client:
        for kwargs, words in cases:
            with pytest.raises(openai.BadRequestError) as caught:
                client.chat.completions.create(
                    model="tool_stream_mistral", messages=ASKING, **kwargs
                )
            assert words in caught.value.message
        # still serving
        assert (
            client.chat.completions.create(
                model="tool_stream_mistral", messages=ASKING, tools=[WEATHER_TOOL]
            )
            .choices[0]
            .message.tool_calls
        )


def test_tools_without_a_parser_are_refused_in_tritons_words(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    repo = tmp_path_factory.mktemp("tools_no_parser")
    tool_call_models.make_tool_stream_mistral(repo)
    serve = ServeProcess(repo)
    serve.wait_ready()
    try:
        with _client(serve) as client:
            for kwargs, words in (
                ({"tools": [WEATHER_TOOL]}, "having tools in the request requires"),
                ({"tools": [WEATHER_TOOL], "tool_choice": "auto"}, '"auto" tool choice requires'),
            ):
                with pytest.raises(openai.BadRequestError, match=words):
                    client.chat.completions.create(
                        model="tool_stream_mistral", messages=ASKING, **kwargs
                    )
            # tool_choice "none": the tools reach the template, the answer is text
            text = client.chat.completions.create(
                model="tool_stream_mistral",
                messages=ASKING,
                tools=[WEATHER_TOOL],
                tool_choice="none",
            )
            assert text.choices[0].message.content.startswith("[TOOL_CALLS]")
    finally:
        serve.stop()
