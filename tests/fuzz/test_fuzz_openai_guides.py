"""Fuzz the guides a request's text must follow: `response_format` (runtime.openai.response_format)
and a named or "required" tool choice's `parameters` (runtime.openai.tool_schema), on any schema.

The schema is anything a client may send where a JSON schema goes: schema-shaped objects
(tests.fuzz.openai_bodies.schemas), any JSON value, non-finite numbers, odd Unicode keys, deep
nesting; and it arrives as bytes, through parse_body, as the server reads it. Property: the
request parses to a Guide or is refused with the module's own `OpenAIError` (a 400); a guide's
schema text is strict JSON (RFC 8259: what a model's guided decoding parses) equal to the
client's schema, and reaches a vLLM-style model as `structured_outputs` JSON and a
TRT-LLM-style one as `guided_decoding_guide`, unchanged.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from hypothesis import strategies as st

from runtime.openai.errors import OpenAIError
from runtime.openai.response_format import GuideKind
from runtime.openai.schema import Sampling, parse_body, parse_chat
from runtime.openai.triton_mapping import generate_request
from tests.fuzz.openai_bodies import FACES, MODEL, hostile, schemas
from tests.fuzz.targets import fuzz_target

_schema = schemas | hostile | st.dictionaries(st.text(max_size=4), hostile, max_size=4)


def _strict(text: str) -> Any:
    """`text` as JSON, refusing what Python's json module reads beyond RFC 8259 (NaN, ±Infinity)."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in a guide's schema text: not JSON")

    return json.loads(text, parse_constant=refuse)


@st.composite
def _requests(draw: st.DrawFn) -> tuple[dict[str, Any], Any]:
    """A chat document guided by `response_format` or by a tool choice, and the schema in it."""
    schema = draw(_schema)
    doc: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
    if draw(st.booleans()):
        spec = {"name": draw(st.sampled_from(["out", "bad name", ""])), "schema": schema}
        doc["response_format"] = {"type": "json_schema", "json_schema": spec}
    else:
        function = {"name": "f", "parameters": schema}
        doc["tools"] = [{"type": "function", "function": function}]
        doc["tool_choice"] = draw(
            st.sampled_from(["required", {"type": "function", "function": {"name": "f"}}])
        )
    return doc, schema


@fuzz_target(_requests())
def _guide(case: tuple[dict[str, Any], Any]) -> None:
    doc, schema = case
    try:
        asked = parse_chat(parse_body(json.dumps(doc).encode()))
    except OpenAIError as exc:
        assert exc.status == 400
        return
    guide = asked.guide
    if schema is None and "tools" in doc:
        assert guide is None  # a tool without parameters: nothing to guide by
        return
    assert guide is not None and guide.kind is GuideKind.JSON_SCHEMA and guide.schema is not None
    assert _strict(guide.schema) == schema
    vllm, trtllm = (
        generate_request(face, "x", Sampling(), stream=False, echo=False, guide=guide)
        for face in reversed(FACES)
    )
    sent = {t.name: np.asarray(t.data).reshape(-1)[0] for t in [*vllm.inputs, *trtllm.inputs]}
    sampling = _strict(sent["sampling_parameters"].decode())
    assert _strict(sampling["structured_outputs"]) == {"json": guide.schema}
    assert sent["guided_decoding_guide"].decode() == guide.schema


test_guides_of_any_schema, test_guides_of_any_schema_long = _guide
