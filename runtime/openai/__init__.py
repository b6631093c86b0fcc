"""The OpenAI-compatible `/v1` routes of `thaw serve` (docs/openai.md), over the ModelService.

    handlers        THE `/v1` route table and thin handlers: JSON answers and SSE streams
    generation      one generation request's choices on the models: text deltas, stops, usage
    chat_template   a chat's messages as one prompt: the model's chat template, or a fallback
    triton_mapping  OpenAI requests as Triton tensors (vLLM and TRT-LLM/Python conventions)
    answers         the OpenAI response documents and the Server-Sent Events carrying them
    schema          OpenAI request bodies parsed strictly into value objects
    json_text       a client's JSON checked as text a model can be given: depth, Unicode
    errors          OpenAI's error shape, and the runtime's errors in it
    logprobs        a vLLM-style model's token log probabilities, in OpenAI's two shapes
    tool_schema     a chat request's tools and tool_choice, parsed; the mode they ask for
    tool_parsers    a model's tool-call text (Mistral's, Llama 3's), read as it grows
    tool_call_scan  tool-call JSON text, perhaps still being written, as the calls so far
    tool_calls      one chat choice's text as OpenAI's answer with tool calls, whole or streamed
    model_control   Triton's OpenAI frontend's load/unload routes
    lora            a request's LoRA adapter (--lora-separator), and the ids /v1/models lists
    response_format  a request's `response_format` as the guide its text must follow

Exports `OpenAIHandlers` and `add_routes`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.openai.handlers import OpenAIHandlers, add_routes

__all__ = ["OpenAIHandlers", "add_routes"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "OpenAIHandlers": "runtime.openai.handlers",
    "add_routes": "runtime.openai.handlers",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
