"""Triton's generate extension: a flat JSON object <-> an infer request, a response -> JSON.

    {"PROMPT": "hi", "STREAM": true, "id": "7", "parameters": {"temperature": 0}}
      keys naming a model input ─▶ that input (a scalar or a 1-D list, shaped to its dims)
      "id"                      ─▶ the request id (and a parameter, as Triton passes it)
      "parameters": {...}       ─▶ each key, again input or parameter
      any other key             ─▶ a request parameter (string, number or boolean)
    response ─▶ {"model_name", "model_version", "id"?, <each output>, <each parameter>}
                (keys sorted; an output of one element is that element, else a flat list)

The texts of the errors are Triton's (2.51's HTTP frontend and its L0_http generate tests).
Pure: callers pass the model's v2 metadata.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from runtime.codecs.tensor_json import json_to_array
from runtime.errors import InvalidInput
from runtime.inference import InferRequest, InferResponse, InferTensor

__all__ = ["decode_generate", "encode_generate", "sse_event"]

_PARAMETERS = "parameters"


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """object_pairs_hook: keep the pairs, so duplicate keys can be refused in order."""
    return {"__pairs__": pairs}


def decode_generate(
    body: bytes, *, model: str, version: str, metadata: dict[str, Any], max_depth: int
) -> InferRequest:
    """The infer request a generate body asks for; InvalidInput in Triton's words."""
    try:
        doc = json.loads(body or b"{}", object_pairs_hook=_pairs)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(doc, dict) or "__pairs__" not in doc:
        raise InvalidInput("the generate request body must be a JSON object")
    _check_depth(doc, max_depth)
    inputs_meta = {i["name"]: i for i in metadata.get("inputs", [])}
    request = InferRequest(model_name=model, model_version=version, inputs=[])
    _convert(doc["__pairs__"], inputs_meta, request, nested=False)
    return request


def _check_depth(value: Any, max_depth: int, depth: int = 0) -> None:
    if depth > max_depth:
        raise InvalidInput(f"JSON nesting depth exceeds maximum allowed limit ({max_depth})")
    if isinstance(value, dict):
        for _, item in value.get("__pairs__", []):
            _check_depth(item, max_depth, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_depth(item, max_depth, depth + 1)


def _convert(
    pairs: list[tuple[str, Any]], inputs: dict[str, Any], request: InferRequest, *, nested: bool
) -> None:
    seen: set[str] = set()
    for key, value in pairs:
        if not nested and key == _PARAMETERS:
            if key in inputs:
                raise InvalidInput(
                    f"Keyword '{key}' for nested schema also given as input tensor name"
                )
            if not isinstance(value, dict):
                raise InvalidInput(f"Expected JSON object for keyword: '{key}'")
            try:
                _convert(value["__pairs__"], inputs, request, nested=True)
            except InvalidInput as exc:
                raise InvalidInput(f"Converting keyword: '{key}': {exc.message}") from None
            continue
        if not nested and key == "id":
            if not isinstance(value, str):
                raise InvalidInput(
                    "Unable to parse 'id': attempt to access JSON non-string as string"
                )
            request.id = value or None
            request.parameters[key] = value  # Triton passes it on to the model as well
        if key in inputs:
            if key in seen:
                raise InvalidInput(f"input '{key}' already exists in request")
            seen.add(key)
            request.inputs.append(_tensor(key, value, inputs[key], request.model_name))
        else:
            request.parameters[key] = _parameter(key, value)


def _parameter(key: str, value: Any) -> str | int | float | bool:
    if isinstance(value, bool | int | float | str):
        return value
    raise InvalidInput(
        f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
    )


def _tensor(name: str, value: Any, meta: dict[str, Any], model: str) -> InferTensor:
    """An input from its generate value, read as an infer request's `data` is read (the same
    kinds, ranges and texts: Triton turns the body into one and parses that)."""
    datatype = meta["datatype"]
    values = value if isinstance(value, list) else [value]
    shape = _shape(name, len(values), [int(d) for d in meta["shape"]])
    data = json_to_array(values, name, datatype, tuple(shape), len(values), model)
    return InferTensor(name, datatype, tuple(shape), data.reshape(shape))


def _shape(name: str, count: int, dims: list[int]) -> list[int]:
    """Triton's two passes: fixed dims divide the count, the innermost -1 takes the rest."""
    remaining = count
    for d in reversed(dims):
        if d != -1:
            if d == 0 or remaining % d:
                raise InvalidInput(
                    f"The schema can not convert input '{name}' to tensor with proper shape"
                )
            remaining //= d
    shape = list(dims)
    for i in range(len(shape) - 1, -1, -1):
        if shape[i] == -1:
            shape[i], remaining = remaining, 1
    if remaining != 1:
        raise InvalidInput(f"The schema can not convert input '{name}' to tensor with proper shape")
    return shape


def encode_generate(response: InferResponse) -> dict[str, Any]:
    """A response as the generate extension's JSON object, its keys in Triton's order
    (sorted, as 2.51 writes them)."""
    doc: dict[str, Any] = {}
    if response.id:
        doc["id"] = response.id
    doc["model_name"] = response.model_name
    doc["model_version"] = response.model_version
    for key, value in response.parameters.items():
        if isinstance(value, bool | int | float | str):
            doc[key] = value
    for tensor in response.outputs:
        flat = _json_values(tensor)
        doc[tensor.name] = flat[0] if math.prod(tensor.shape) == 1 and len(flat) == 1 else flat
    return dict(sorted(doc.items()))


def _json_values(tensor: InferTensor) -> list[Any]:
    data = np.asarray(tensor.data).reshape(-1)
    if tensor.datatype == "BYTES":
        return [
            item.decode("utf-8", errors="replace") if isinstance(item, bytes) else str(item)
            for item in data
        ]
    if tensor.datatype == "BF16":
        widened = data.astype(np.uint16).astype(np.uint32) << 16
        return list(widened.view(np.float32).tolist())
    return list(data.tolist())


def sse_event(doc: dict[str, Any]) -> bytes:
    """One Server-Sent Event carrying `doc`, as Triton writes them."""
    return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"
