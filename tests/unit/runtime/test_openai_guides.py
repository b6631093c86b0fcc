"""`response_format` as guided decoding: "text" asks nothing, "json_object" any JSON object,
"json_schema" its schema (compact JSON text, as a named tool's); vLLM-style models get
sampling_parameters' `structured_outputs` as vllm_backend reads it, TRT-LLM / Python-style
models the guide inputs they declare; a malformed one is 400 naming `response_format`, and one
beside a named or "required" tool_choice is refused."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from runtime.openai.errors import OpenAIError
from runtime.openai.response_format import Guide, GuideKind, parse_response_format
from runtime.openai.schema import Sampling, parse_chat, parse_completion
from runtime.openai.triton_mapping import ModelFace, generate_request

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Zürich"]}}}
SCHEMA_TEXT = '{"type":"object","properties":{"city":{"type":"string","enum":["Zürich"]}}}'
AS_SCHEMA = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}

VLLM = ModelFace(
    name="m",
    version="1",
    inputs={"text_input": ("BYTES", (1,)), "sampling_parameters": ("BYTES", (1,))},
    outputs=frozenset({"text_output"}),
    vllm=True,
)
TRTLLM = ModelFace(
    name="m",
    version="1",
    inputs={
        "text_input": ("BYTES", (1, 1)),
        "guided_decoding_guide_type": ("BYTES", (1, 1)),
        "guided_decoding_guide": ("BYTES", (1, 1)),
    },
    outputs=frozenset({"text_output"}),
    vllm=False,
)


def _inputs(face: ModelFace, guide: Guide | None) -> dict[str, Any]:
    request = generate_request(face, "p", Sampling(), stream=False, echo=False, guide=guide)
    return {t.name: np.asarray(t.data).reshape(-1)[0] for t in request.inputs}


@pytest.mark.parametrize(
    ("value", "guide"),
    [
        (None, None),
        ({"type": "text"}, None),
        ({"type": "json_object"}, Guide(GuideKind.JSON_OBJECT)),
        (AS_SCHEMA, Guide(GuideKind.JSON_SCHEMA, SCHEMA_TEXT)),
        (
            {
                "type": "json_schema",
                "json_schema": {
                    "name": "a-b_1",
                    "schema": SCHEMA,
                    "strict": True,
                    "description": "d",
                },
            },
            Guide(GuideKind.JSON_SCHEMA, SCHEMA_TEXT),
        ),
    ],
)
def test_each_type_asks_its_guide(value: Any, guide: Guide | None) -> None:
    assert parse_response_format({"response_format": value}) == guide
    assert parse_chat({**CHAT, "response_format": value}).guide == guide
    assert parse_completion({"model": "m", "prompt": "p", "response_format": value}).guide == guide


@pytest.mark.parametrize(
    "value",
    [
        "json_object",
        ["json_object"],
        {},
        {"type": "xml"},
        {"type": "json_schema"},
        {"type": "json_schema", "json_schema": "city"},
        {"type": "json_schema", "json_schema": {"schema": SCHEMA}},
        {"type": "json_schema", "json_schema": {"name": "a b", "schema": SCHEMA}},
        {"type": "json_schema", "json_schema": {"name": "x" * 65, "schema": SCHEMA}},
        {"type": "json_schema", "json_schema": {"name": "c"}},
        {"type": "json_schema", "json_schema": {"name": "c", "schema": "{}"}},
        {"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMA, "strict": "yes"}},
    ],
)
def test_a_malformed_response_format_is_400_naming_it(value: Any) -> None:
    with pytest.raises(OpenAIError) as refused:
        parse_chat({**CHAT, "response_format": value})
    assert (refused.value.status, refused.value.param) == (400, "response_format")


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "f"}}])
def test_beside_a_guided_tool_choice_it_is_refused(choice: Any) -> None:
    body = {**CHAT, "tools": [TOOL], "tool_choice": choice, "response_format": AS_SCHEMA}
    with pytest.raises(OpenAIError) as refused:
        parse_chat(body)
    assert refused.value.param == "response_format"
    assert "tool_choice" in refused.value.message
    # "text" asks nothing, so it goes with any choice; so does "auto" with a format
    assert parse_chat({**body, "response_format": {"type": "text"}}).guide == Guide(
        GuideKind.JSON_SCHEMA, '{"type":"object"}'
    )
    auto = parse_chat({**body, "tool_choice": "auto"})
    assert auto.guide == Guide(GuideKind.JSON_SCHEMA, SCHEMA_TEXT)


def test_vllm_style_gets_structured_outputs_as_vllm_backend_reads_it() -> None:
    def structured(guide: Guide) -> Any:
        return json.loads(
            json.loads(_inputs(VLLM, guide)["sampling_parameters"])["structured_outputs"]
        )

    # vllm_backend: StructuredOutputsParams(**json.loads(sampling["structured_outputs"]))
    assert structured(Guide(GuideKind.JSON_SCHEMA, SCHEMA_TEXT)) == {"json": SCHEMA_TEXT}
    assert structured(Guide(GuideKind.JSON_OBJECT)) == {"json_object": True}


def test_trtllm_style_gets_the_guide_inputs() -> None:
    schema = _inputs(TRTLLM, Guide(GuideKind.JSON_SCHEMA, SCHEMA_TEXT))
    assert schema["guided_decoding_guide_type"] == b"json_schema"
    assert schema["guided_decoding_guide"].decode() == SCHEMA_TEXT
    any_object = _inputs(TRTLLM, Guide(GuideKind.JSON_OBJECT))
    assert any_object["guided_decoding_guide_type"] == b"json"  # TensorRT-LLM's GuideType.JSON
    assert "guided_decoding_guide" not in any_object
