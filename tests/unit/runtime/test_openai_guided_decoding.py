"""Guided decoding for a named or "required" tool_choice, as Triton's OpenAI frontend asks for it
(its `_get_guided_json_from_tool`): the tool's `parameters` JSON schema reaches a vLLM-style model
as `sampling_parameters`' `structured_outputs` (the form vllm_backend reads) and a TRT-LLM /
Python one as `guided_decoding_guide_type` / `guided_decoding_guide`, only where declared."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.openai.errors import OpenAIError
from runtime.openai.generation import Generation
from runtime.openai.response_format import Guide
from runtime.openai.schema import Sampling, parse_chat
from runtime.openai.tool_schema import parse_tools
from runtime.openai.triton_mapping import ModelFace, generate_request

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "a city, e.g. Zürich"}},
    "required": ["city"],
}
# pydantic's model_dump_json of Triton's FunctionParameters: compact, key order kept, UTF-8
SCHEMA_TEXT = (
    '{"type":"object","properties":{"city":{"type":"string","description":"a city, e.g. Zürich"}},'
    '"required":["city"]}'
)
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}
FORECAST = {"type": "function", "function": {"name": "forecast", "parameters": {"type": "object"}}}
BARE = {"type": "function", "function": {"name": "bare"}}  # no parameters
NAMED = {"type": "function", "function": {"name": "forecast"}}

TRTLLM_GUIDED = ModelFace(
    name="m",
    version="1",
    inputs={
        "text_input": ("BYTES", (1, 1)),
        "max_tokens": ("INT32", (1, 1)),
        "guided_decoding_guide_type": ("BYTES", (1, 1)),
        "guided_decoding_guide": ("BYTES", (1, 1)),
    },
    outputs=frozenset({"text_output"}),
    vllm=False,
)
TRTLLM_PLAIN = ModelFace(
    name="m",
    version="1",
    inputs={"text_input": ("BYTES", (1, 1)), "max_tokens": ("INT32", (1, 1))},
    outputs=frozenset({"text_output"}),
    vllm=False,
)
VLLM = ModelFace(
    name="m",
    version="1",
    inputs={"text_input": ("BYTES", (1,)), "sampling_parameters": ("BYTES", (1,))},
    outputs=frozenset({"text_output"}),
    vllm=True,
)


def _inputs(request: InferRequest) -> dict[str, Any]:
    return {t.name: np.asarray(t.data).reshape(-1)[0] for t in request.inputs}


def test_a_named_or_required_choice_is_guided_by_its_tools_parameters() -> None:
    assert parse_tools({"tools": [WEATHER, FORECAST], "tool_choice": "required"}).guide == (
        SCHEMA_TEXT
    )  # "required": the first tool, as Triton's frontend picks it
    named = parse_tools({"tools": [WEATHER, FORECAST], "tool_choice": NAMED})
    assert named.guide == '{"type":"object"}'


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"tools": [WEATHER]},
        {"tools": [WEATHER], "tool_choice": "auto"},
        {"tools": [WEATHER], "tool_choice": "none"},
        # a tool without `parameters` has no schema to guide by: its answer is unguided
        {"tools": [BARE], "tool_choice": "required"},
    ],
)
def test_no_guide_without_a_named_choice_or_a_schema(body: dict[str, Any]) -> None:
    assert parse_tools(body).guide is None


def test_a_named_choice_not_in_tools_is_refused_in_tritons_words() -> None:
    with pytest.raises(OpenAIError) as caught:
        parse_tools({"tools": [WEATHER], "tool_choice": {**NAMED, "function": {"name": "x"}}})
    assert caught.value.status == 400 and caught.value.param == "tool_choice"
    assert caught.value.message == "Tool 'x' has not been passed in `tools`."


def test_vllm_style_gets_structured_outputs_as_vllm_backend_reads_it() -> None:
    got = _inputs(generate_request(VLLM, "p", Sampling(max_tokens=4), stream=False, echo=False,
                                   guide=Guide.of_schema(SCHEMA_TEXT)))  # fmt: skip
    sampling = json.loads(got["sampling_parameters"])
    assert sampling["max_tokens"] == 4
    # vllm_backend: StructuredOutputsParams(**json.loads(sampling["structured_outputs"]))
    assert json.loads(sampling["structured_outputs"]) == {"json": SCHEMA_TEXT}
    unguided = _inputs(generate_request(VLLM, "p", Sampling(), stream=False, echo=False))
    assert "structured_outputs" not in json.loads(unguided["sampling_parameters"])


def test_trtllm_style_gets_the_guide_inputs_only_where_declared() -> None:
    got = _inputs(generate_request(TRTLLM_GUIDED, "p", Sampling(), stream=False, echo=False,
                                   guide=Guide.of_schema(SCHEMA_TEXT)))  # fmt: skip
    assert got["guided_decoding_guide_type"] == b"json_schema"
    assert got["guided_decoding_guide"].decode() == SCHEMA_TEXT
    unguided = _inputs(generate_request(TRTLLM_GUIDED, "p", Sampling(), stream=False, echo=False))
    assert "guided_decoding_guide" not in unguided and "guided_decoding_guide_type" not in unguided
    # A model that declares neither input gets no guide (only declared inputs are sent).
    plain = _inputs(generate_request(TRTLLM_PLAIN, "p", Sampling(), stream=False, echo=False,
                                     guide=Guide.of_schema(SCHEMA_TEXT)))  # fmt: skip
    assert set(plain) == {"text_input", "max_tokens"}


class Recorder:
    """Answers each request with one empty response, keeping the requests."""

    def __init__(self) -> None:
        self.requests: list[InferRequest] = []

    async def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        self.requests.append(request)
        text = np.array([b"{}"], dtype=np.object_)
        yield InferResponse("m", "1", [InferTensor("text_output", "BYTES", (1,), text)])


def test_every_choice_of_a_named_chat_carries_the_guide() -> None:
    asked = parse_chat(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "weather?"}],
            "tools": [WEATHER],
            "tool_choice": "required",
            "n": 2,
        }
    )
    models = Recorder()

    async def run() -> None:
        async for _ in Generation(models, TRTLLM_GUIDED, asked, ("prompt",)).events():
            pass

    asyncio.run(run())
    assert [_inputs(r)["guided_decoding_guide"].decode() for r in models.requests] == [
        SCHEMA_TEXT,
        SCHEMA_TEXT,
    ]
