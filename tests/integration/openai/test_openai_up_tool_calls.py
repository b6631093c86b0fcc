"""Tool calling through a real `thaw up --tool-call-parser mistral` with its model at zero: a
chat with tools wakes the model, and the replica, given the parser and the parse limit by
`thaw up`, answers with tool calls, streamed and whole, and cuts a streamed call past the
limit, and a named tool choice reaches the model with its guided decoding."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest

from tests.fixtures import tool_call_models
from tests.fixtures.up_process import UpProcess, light_args, with_params

pytestmark = pytest.mark.integration

WEATHER_TOOL = {
    "type": "function",
    "function": {"name": "get_current_weather", "parameters": {"type": "object"}},
}


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("openai_up_tools")
    with_params(tool_call_models.make_tool_stream_mistral(repo), max_replicas=1)
    server = UpProcess(
        repo,
        *light_args(repo),
        "--tool-call-parser", "mistral",
        "--max-tool-call-parse-bytes", "512",
    )  # fmt: skip
    yield server
    server.stop()


def test_a_chat_with_tools_wakes_the_model_and_gets_calls(up: UpProcess) -> None:
    assert len(up.model("tool_stream_mistral")["replicas"]) == 0
    messages = [{"role": "user", "content": "weather in Dallas?"}]
    with openai.OpenAI(base_url=up.url + "/v1", api_key="none", max_retries=0, timeout=120) as c:
        whole = c.chat.completions.create(
            model="tool_stream_mistral", messages=messages, tools=[WEATHER_TOOL]
        )
        (call,) = whole.choices[0].message.tool_calls or []
        assert whole.choices[0].finish_reason == "tool_calls"
        assert json.loads(call.function.arguments)["city"] == "Dallas"
        stream = c.chat.completions.create(
            model="tool_stream_mistral", messages=messages, tools=[WEATHER_TOOL], stream=True
        )
        chunks = list(stream)
        arguments = "".join(
            d.function.arguments or ""
            for ch in chunks
            for d in ch.choices[0].delta.tool_calls or []
            if d.function
        )
        assert arguments == call.function.arguments
        assert [ch.choices[0].finish_reason for ch in chunks][-1] == "tool_calls"
        # the replica got the limit too: a 2000-character argument is cut
        big = c.chat.completions.create(
            model="tool_stream_mistral",
            messages=[{"role": "user", "content": "big-tool-args"}],
            tools=[WEATHER_TOOL],
            stream=True,
            max_completion_tokens=4096,
        )
        assert [ch.choices[0].finish_reason for ch in big][-1] == "length"


def test_a_named_choice_reaches_the_replica_with_its_guide(up: UpProcess) -> None:
    named = {"type": "function", "function": {"name": "get_current_weather"}}
    with openai.OpenAI(base_url=up.url + "/v1", api_key="none", max_retries=0, timeout=120) as c:
        whole = c.chat.completions.create(
            model="tool_stream_mistral",
            messages=[{"role": "user", "content": "show-guide"}],
            tools=[WEATHER_TOOL],
            tool_choice=named,
        )
    (call,) = whole.choices[0].message.tool_calls or []
    assert call.function.name == "get_current_weather"
    # the model answers the guided decoding it was given: the tool's schema, compact
    assert json.loads(call.function.arguments) == {
        "guide_type": "json_schema",
        "guide": '{"type":"object"}',
    }
