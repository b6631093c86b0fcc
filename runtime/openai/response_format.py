"""A request's `response_format`, parsed strictly (pure; untrusted input), as the guide the
model's text must follow (guided decoding; runtime.openai.triton_mapping says how each kind of
model is given it).

    {"type": "text"}                                      ─▶ no guide
    {"type": "json_object"}                               ─▶ Guide(JSON_OBJECT): any JSON object
    {"type": "json_schema", "json_schema": {"name", "schema", "description", "strict"}}
                                                          ─▶ Guide(JSON_SCHEMA, schema text)

A named or "required" tool_choice is guided by its tool's `parameters` the same way
(`Guide.of_schema`); a request may not ask for both (400: each would constrain the text).
Triton's OpenAI frontend leaves `response_format` out of what it sends the model; vLLM's own
server maps it as here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from runtime.openai.errors import OpenAIError

__all__ = ["Guide", "GuideKind", "parse_response_format", "schema_text"]

_PARAM = "response_format"
# OpenAI's rule for `json_schema.name`.
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class GuideKind(StrEnum):
    JSON_SCHEMA = "json_schema"  # text that is valid against `Guide.schema`
    JSON_OBJECT = "json_object"  # text that is any one JSON object


@dataclass(frozen=True, slots=True)
class Guide:
    """What the model's text must follow; `schema`: the JSON schema as compact JSON text
    (JSON_SCHEMA only)."""

    kind: GuideKind
    schema: str | None = None

    @classmethod
    def of_schema(cls, schema: str) -> Guide:
        return cls(GuideKind.JSON_SCHEMA, schema)


def schema_text(schema: dict[str, Any]) -> str:
    """A JSON schema as the model is given it: compact JSON, keys in the client's order,
    non-ASCII kept (pydantic's `model_dump_json`, as Triton's frontend writes a tool's)."""
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


def parse_response_format(doc: dict[str, Any]) -> Guide | None:
    """The guide a request body's `response_format` asks for (None: none, or "text")."""
    value = doc.get(_PARAM)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise OpenAIError("'response_format' must be an object", param=_PARAM)
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == GuideKind.JSON_OBJECT:
        return Guide(GuideKind.JSON_OBJECT)
    if kind != GuideKind.JSON_SCHEMA:
        raise OpenAIError(
            "'response_format.type' must be one of 'text', 'json_object', 'json_schema'",
            param=_PARAM,
        )
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise OpenAIError(
            "'response_format.json_schema' must be an object with a 'name' and a 'schema'",
            param=_PARAM,
        )
    name = spec.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise OpenAIError(
            "'response_format.json_schema.name' must be 1 to 64 letters, digits, '_' or '-'",
            param=_PARAM,
        )
    for key, kind_ in (("description", str), ("strict", bool)):
        if spec.get(key) is not None and not isinstance(spec[key], kind_):
            raise OpenAIError(
                f"'response_format.json_schema.{key}' must be of type {kind_.__name__}",
                param=_PARAM,
            )
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        # Nothing to guide by: refused rather than answered unguided.
        raise OpenAIError(
            "'response_format.json_schema.schema' must be a JSON schema object", param=_PARAM
        )
    return Guide.of_schema(schema_text(schema))
