"""Hostile OpenAI request bodies for the fuzz targets: each field right, wrong, or absent.

`chat_bodies()` and `completion_bodies()` draw a request document whose every field is a value
of its right shape or a hostile one (any JSON value, wrong types, huge and non-finite numbers,
empty and long strings, odd Unicode); `body_bytes()` serializes one, at times with what only
raw bytes can carry (a lone `\\ud800` escape, nesting past any limit, a cut, not JSON at all).
`schemas` draws JSON-schema-like objects, for `response_format` and tools' `parameters`.
`FACES` are the two kinds of model a request is mapped onto (TRT-LLM style, vLLM style).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from hypothesis import strategies as st

from runtime.openai.triton_mapping import ModelFace
from tests.fuzz.targets import json_values

__all__ = [
    "EMBEDDING_MODEL",
    "FACES",
    "MODEL",
    "TEMPLATED_MODEL",
    "body_bytes",
    "chat_bodies",
    "completion_bodies",
    "conversation",
    "embedding_bodies",
    "hostile",
    "numbers",
    "schemas",
]

MODEL = "echo_llm"  # the names the HTTP target's server gives its models
TEMPLATED_MODEL = "templated_llm"
EMBEDDING_MODEL = "embed_text"

_ODD_TEXT = st.sampled_from(
    ["", " ", "\x00", "\u202e", "\U0001f600", "\ufeff", "e\u0301", "[TOOL_CALLS]", "<|python_tag|>",
     "{{ 1 }}", "{% raw %}", "\\ud800", "null"]
)  # fmt: skip
_LONG_TEXT = st.integers(100, 5000).map(lambda n: "x\n" * n)
text = st.text(min_size=1, max_size=16) | _ODD_TEXT | _LONG_TEXT
numbers = (
    st.integers(-(1 << 70), 1 << 70)
    | st.floats()  # NaN and the infinities too: json.loads reads `NaN`, `Infinity`
    | st.sampled_from(
        [0, 1, -1, 2, 5, 6, 16, 17, 20, 21, 2**31, 2**63 - 1, 2**63, 2**64, 1e308, -0.0, 0.5, 2.5]
    )
)
hostile = json_values | numbers | text | st.booleans()
"""Any value a client may put in a field, mostly of the wrong type or range."""


def _field(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's value: right-shaped seven times in eight, hostile otherwise (shrinking
    towards right-shaped, so a failure's example keeps only the hostile fields it needs)."""
    return st.integers(0, 7).flatmap(lambda i: hostile if i == 7 else good)


@st.composite
def _object(
    draw: st.DrawFn,
    required: dict[str, st.SearchStrategy[Any]],
    optional: dict[str, st.SearchStrategy[Any]] | None = None,
    *,
    missing: bool = True,
) -> dict[str, Any]:
    """An object with its `required` keys (with `missing`, each left out one time in ten) and
    some of its `optional` ones (each there one time in three)."""
    doc = {}
    for key, value in required.items():
        if not missing or draw(st.integers(0, 9)) < 9:
            doc[key] = draw(value)
    for key, value in (optional or {}).items():
        if draw(st.integers(0, 2)) == 2:
            doc[key] = draw(value)
    return doc


_NAMES = st.sampled_from(["get_weather", "f", "a.b:c-d_e", "x" * 64, "x" * 65, "", "bad name"])

schemas = st.recursive(
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["object", "string", "integer", "array", "null"]) | hostile,
            "enum": st.lists(json_values, max_size=3),
            "$ref": st.sampled_from(["#", "#/definitions/x", "http://x/y", "#/$defs/nope"]),
            "pattern": st.sampled_from(["^a+$", "(", "[", ".*" * 20]),
            "minimum": numbers,
            "maxLength": numbers,
            "additionalProperties": st.booleans(),
        },
    ),
    lambda inner: st.fixed_dictionaries(
        {},
        optional={
            "type": st.just("object"),
            "properties": st.dictionaries(text, inner, max_size=3),
            "items": inner,
            "anyOf": st.lists(inner, max_size=3),
            "required": st.lists(text, max_size=3) | hostile,
            "$defs": st.dictionaries(text, inner, max_size=2),
        },
    ),
    max_leaves=12,
)
"""Objects shaped like JSON schemas (valid ones, and not)."""


# Depths about the interpreter's recursion limit: JSON nested so deep parses in one place
# and overflows in another (json.loads in a shallow frame, a template's `tojson` in a deep one).
_DEEP = st.integers(1, 3000) | st.sampled_from(
    [sys.getrecursionlimit() - k for k in (1, 10, 20, 30, 40, 60, 100, 200)]
)


@st.composite
def _arguments(draw: st.DrawFn) -> Any:
    """An earlier call's `arguments`: JSON text (of an object or not), odd text, or no text."""
    kind = draw(st.integers(0, 5))
    if kind == 1:
        return draw(hostile)
    if kind == 2:
        return draw(text)
    if kind == 3:  # an object nested deep, as text: the body's own depth limit does not see it
        depth = draw(_DEEP)
        return '{"a":' + "[" * depth + "]" * depth + "}"
    if kind == 4:  # escapes that decode to what the body itself may not carry
        return draw(st.sampled_from(['{"a": "\\ud800"}', '{"\\udfff": 1}', '{"a": NaN}']))
    value = draw(st.dictionaries(text, json_values, max_size=4) | json_values)
    return json.dumps(value)


def conversation(
    *, wrong: bool = True
) -> tuple[st.SearchStrategy[list[Any]], st.SearchStrategy[list[Any]]]:
    """A chat's `messages` and `tools`: with `wrong`, each field right, wrong or missing;
    without, every one right-shaped (their text, and earlier calls' arguments, still odd)."""
    field = _field if wrong else (lambda good: good)

    def obj(
        required: dict[str, st.SearchStrategy[Any]],
        optional: dict[str, st.SearchStrategy[Any]] | None = None,
    ) -> st.SearchStrategy[dict[str, Any]]:
        return _object(required, optional, missing=wrong)

    call = obj(
        {
            "id": field(st.sampled_from(["call_1", "123456789", ""])),
            "type": field(st.just("function")),
            "function": field(obj({"name": field(_NAMES), "arguments": _arguments()})),
        }
    )
    part = obj(
        {"type": field(st.sampled_from(["text", "text", "refusal", "image_url"]))},
        {"text": field(text), "refusal": field(text), "image_url": hostile},
    )
    message = obj(
        {
            "role": field(st.sampled_from(["system", "developer", "user", "assistant", "tool"])),
            "content": field(text | st.lists(part, max_size=3)),
        },
        {
            "tool_calls": field(st.lists(call, max_size=3)),
            "tool_call_id": field(st.sampled_from(["call_1", "123456789"])),
            "name": field(text),
        },
    )
    tool = obj(
        {
            "type": field(st.just("function")),
            "function": field(
                obj(
                    {"name": field(_NAMES)},
                    {
                        "description": field(text),
                        "parameters": field(schemas),
                        "strict": field(st.booleans()),
                    },
                )
            ),
        }
    )
    return st.lists(message, min_size=1, max_size=5), st.lists(tool, max_size=4)


_messages, _tools = conversation()


_tool_choice = _field(
    st.sampled_from(["none", "auto", "required"])
    | _object({"type": _field(st.just("function")), "function": _field(_object({"name": _NAMES}))})
)
_response_format = _field(
    _object(
        {"type": _field(st.sampled_from(["text", "json_object", "json_schema"]))},
        {
            "json_schema": _field(
                _object(
                    {"name": _field(_NAMES), "schema": _field(schemas)},
                    {"strict": _field(st.booleans()), "description": _field(text)},
                )
            )
        },
    )
)
_COMMON = {
    "max_tokens": _field(st.integers(1, 8)),
    "n": _field(st.integers(1, 4)),
    "stop": _field(text | st.lists(text, max_size=6)),
    "stream": _field(st.booleans()),
    "stream_options": _field(_object({}, {"include_usage": _field(st.booleans())})),
    "seed": _field(st.integers(-(1 << 63), (1 << 63) - 1)),
    "temperature": _field(st.floats(0, 2)),
    "top_p": _field(st.floats(0, 1)),
    "frequency_penalty": _field(st.floats(-2, 2)),
    "presence_penalty": _field(st.floats(-2, 2)),
    "logit_bias": _field(st.just({})),
    "user": hostile,
    "metadata": hostile,
    "response_format": _response_format,
}
_MODEL = _field(
    st.sampled_from([MODEL, MODEL, TEMPLATED_MODEL, "no_such_model", "", "a/../b", MODEL + "_x"])
)


def chat_bodies() -> st.SearchStrategy[dict[str, Any]]:
    """A `/v1/chat/completions` document."""
    optional = {
        **_COMMON,
        "max_completion_tokens": _field(st.integers(1, 8)),
        "logprobs": _field(st.booleans()),
        "top_logprobs": _field(st.integers(0, 20)),
        "tools": _field(_tools),
        "tool_choice": _tool_choice,
        "parallel_tool_calls": _field(st.booleans()),
        "functions": _field(st.none()),
    }
    return _object({"model": _MODEL, "messages": _field(_messages)}, optional)


def completion_bodies() -> st.SearchStrategy[dict[str, Any]]:
    """A `/v1/completions` document."""
    optional = {
        **_COMMON,
        "echo": _field(st.booleans()),
        "logprobs": _field(st.integers(0, 5)),
        "suffix": _field(st.just("")),
        "best_of": _field(st.just(1)),
    }
    prompt = _field(text | st.lists(text, min_size=1, max_size=20))
    return _object({"model": _MODEL, "prompt": prompt}, optional)


def embedding_bodies() -> st.SearchStrategy[dict[str, Any]]:
    """A `/v1/embeddings` document."""
    model = _field(st.sampled_from([EMBEDDING_MODEL, EMBEDDING_MODEL, MODEL, "no_such_model"]))
    optional = {
        "encoding_format": _field(st.sampled_from(["float", "base64"])),
        "dimensions": _field(st.integers(1, 8)),
        "user": hostile,
    }
    inputs = _field(text | st.lists(text, min_size=1, max_size=8))
    return _object({"model": model, "input": inputs}, optional)


@st.composite
def body_bytes(draw: st.DrawFn, documents: st.SearchStrategy[Any]) -> bytes:
    """One of `documents` as a request body's bytes (two times in three), or bytes no
    serializer would write."""
    kind = draw(st.integers(0, 14))  # shrinks towards the plain document
    if kind == 14:
        return draw(st.binary(max_size=64))
    raw = json.dumps(draw(documents)).encode()
    if kind == 13:  # cut short
        return raw[: draw(st.integers(0, len(raw)))]
    if kind == 12:  # a lone surrogate escape in place of some string's first character
        return raw.replace(b'"', b'"\\ud800', 1) if b'"' in raw else raw
    if kind == 11 and raw.endswith(b"}") and raw != b"{}":  # a field nested past any limit
        depth = draw(st.integers(1, 5000))
        opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
        return raw[:-1] + b', "deep": ' + opener * depth + b"0" + closer * depth + b"}"
    if kind == 10:  # another encoding of the same document
        return raw.decode().encode(draw(st.sampled_from(["utf-16", "utf-32", "utf-8-sig"])))
    return raw


_OUTPUTS = ("text_output", "logprobs")


def _face(inputs: dict[str, tuple[str, list[int]]], backend: str) -> ModelFace:
    metadata = {
        "versions": ["1"],
        "inputs": [{"name": n, "datatype": d, "shape": s} for n, (d, s) in inputs.items()],
        "outputs": [{"name": n, "datatype": "BYTES", "shape": [-1]} for n in _OUTPUTS],
    }
    return ModelFace.of("m", metadata, {"backend": backend})


_COUNTS = {"return_num_input_tokens": ("BOOL", [1]), "return_num_output_tokens": ("BOOL", [1])}
FACES = (  # what a request is mapped onto: a TRT-LLM-style model, a vLLM-style one
    _face(
        {
            "text_input": ("BYTES", [1, 1]),
            "stream": ("BOOL", [1, 1]),
            "max_tokens": ("INT32", [1, 1]),
            "temperature": ("FP32", [1, 1]),
            "top_p": ("FP32", [1, 1]),
            "seed": ("UINT64", [1, 1]),
            "stop_words": ("BYTES", [1, -1]),
            "frequency_penalty": ("FP32", [1, 1]),
            "exclude_input_in_output": ("BOOL", [1, 1]),
            "guided_decoding_guide_type": ("BYTES", [1, 1]),
            "guided_decoding_guide": ("BYTES", [1, 1]),
            **_COUNTS,
        },
        "python",
    ),
    _face(
        {
            "text_input": ("BYTES", [1]),
            "stream": ("BOOL", [1]),
            "sampling_parameters": ("BYTES", [1]),
            "exclude_input_in_output": ("BOOL", [1]),
            "return_logprobs": ("BOOL", [1]),
            **_COUNTS,
        },
        "vllm",
    ),
)
