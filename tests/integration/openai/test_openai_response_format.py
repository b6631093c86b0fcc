"""`response_format` through the `openai` client, unchanged, against a real `thaw serve`: a JSON
schema or "any JSON object" reaches the model as guided decoding — a vLLM-style model's
sampling_parameters `structured_outputs`, a TRT-LLM-style model's guide inputs (the test models
answer what they were given) — streamed and whole alike; "text" asks for nothing; a malformed
format and a format beside a named tool choice are refused 400 in OpenAI's error document."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.fixtures import openai_models, tool_call_models
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
SCHEMA_TEXT = '{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}'
AS_SCHEMA: Any = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}}
ASKING: Any = [{"role": "user", "content": "show-guide"}]


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("response_format")
    openai_models.make_params_vllm(repo)
    tool_call_models.make_tool_stream_mistral(repo)
    server = ServeProcess(repo)
    server.wait_ready()
    yield server
    server.stop()


def _client(server: ServeProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def _structured(text: str | None) -> Any:
    sampling = json.loads(text or "")["sampling_parameters"]
    raw = sampling.get("structured_outputs")
    return None if raw is None else json.loads(raw)


def test_a_vllm_style_model_gets_structured_outputs(serve: ServeProcess) -> None:
    with _client(serve) as client:
        cases: list[tuple[Any, Any]] = [
            (AS_SCHEMA, {"json": SCHEMA_TEXT}),
            ({"type": "json_object"}, {"json_object": True}),
            ({"type": "text"}, None),
        ]
        for fmt, expected in cases:
            chat = client.chat.completions.create(
                model="params_vllm", messages=ASKING, response_format=fmt
            )
            assert _structured(chat.choices[0].message.content) == expected
            stream = client.chat.completions.create(
                model="params_vllm", messages=ASKING, response_format=fmt, stream=True
            )
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            assert _structured(text) == expected
        # completions take it too, as vLLM's server does
        completion = client.completions.create(
            model="params_vllm", prompt="p", extra_body={"response_format": AS_SCHEMA}
        )
        assert _structured(completion.choices[0].text) == {"json": SCHEMA_TEXT}


def test_a_trtllm_style_model_gets_its_guide_inputs(serve: ServeProcess) -> None:
    with _client(serve) as client:
        cases: list[tuple[Any, Any]] = [
            (AS_SCHEMA, {"guide_type": "json_schema", "guide": SCHEMA_TEXT}),
            ({"type": "json_object"}, {"guide_type": "json", "guide": None}),
            ({"type": "text"}, {"guide_type": None, "guide": None}),
        ]
        for fmt, expected in cases:
            chat = client.chat.completions.create(
                model="tool_stream_mistral", messages=ASKING, response_format=fmt
            )
            assert json.loads(chat.choices[0].message.content or "") == expected


@pytest.mark.parametrize(
    "fmt",
    [
        {"type": "xml"},
        {"type": "json_schema"},
        {"type": "json_schema", "json_schema": {"name": "no spaces", "schema": SCHEMA}},
        {"type": "json_schema", "json_schema": {"name": "city", "schema": []}},
        "json",
    ],
)
def test_a_malformed_format_is_400_in_openais_shape(serve: ServeProcess, fmt: Any) -> None:
    with _client(serve) as client, pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="params_vllm", messages=ASKING, response_format=fmt)
    assert refused.value.param == "response_format"
    assert refused.value.body["type"] == "invalid_request_error"  # type: ignore[index]


def test_a_format_beside_a_named_tool_choice_is_refused(serve: ServeProcess) -> None:
    tool: Any = {"type": "function", "function": {"name": "f", "parameters": SCHEMA}}
    with _client(serve) as client, pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="params_vllm",
            messages=ASKING,
            tools=[tool],
            tool_choice={"type": "function", "function": {"name": "f"}},
            response_format={"type": "json_object"},
        )
    assert refused.value.param == "response_format"
    assert "tool_choice" in refused.value.message
