"""Fuzz the OpenAI request bodies: bytes → parse_body → parse_chat / parse_completion → tensors.

Bodies come from tests.fuzz.openai_bodies: every field right, wrong or absent (wrong types,
huge and non-finite numbers, deep nesting, lone surrogates, odd Unicode, not JSON at all).
Property: parsing gives a GenerationRequest or raises the module's own `OpenAIError` (a 4xx in
OpenAI's shape); never another exception, never a hang. A request that parses goes all the way
to what a model is sent — its fallback prompt, its guide, the infer request for a TRT-LLM-style
and a vLLM-style model — and each step either works or raises OpenAIError; the prompt and every
BYTES tensor are UTF-8 text, and a guide's schema is JSON.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from hypothesis import strategies as st

from runtime.openai.chat_template import fallback_prompt
from runtime.openai.errors import OpenAIError
from runtime.openai.schema import GenerationRequest, parse_body, parse_chat, parse_completion
from runtime.openai.triton_mapping import generate_request
from tests.fuzz.openai_bodies import FACES, body_bytes, chat_bodies, completion_bodies
from tests.fuzz.targets import fuzz_target


def _all_the_way(asked: GenerationRequest) -> None:
    """What the server does with a parsed request before the model answers: each step works
    or refuses with OpenAIError, and what it makes is UTF-8 text and JSON."""
    prompts = asked.prompts
    if asked.is_chat:
        prompts = (fallback_prompt(asked.messages, asked.tools.tools),)
    guide = asked.guide  # a named tool's parameters, or response_format's schema
    if guide is not None and guide.schema is not None:
        json.loads(guide.schema)
    for face in FACES:
        for prompt in prompts:
            try:
                infer = generate_request(
                    face, prompt, asked.sampling, stream=asked.stream, echo=asked.echo,
                    logprobs=asked.logprobs, guide=guide,
                )  # fmt: skip
            except OpenAIError:
                continue
            for tensor in infer.inputs:
                if tensor.datatype == "BYTES":
                    for item in np.asarray(tensor.data).reshape(-1):
                        item.decode("utf-8")
            for tensor in infer.inputs:
                if tensor.name == "sampling_parameters":
                    json.loads(np.asarray(tensor.data).reshape(-1)[0])


def _parsed(raw: bytes, parse: Any) -> None:
    try:
        asked = parse(parse_body(raw))
    except OpenAIError as exc:
        assert 400 <= exc.status < 500, exc.status
        json.dumps(exc.body())
        return
    assert isinstance(asked, GenerationRequest)
    _all_the_way(asked)


@fuzz_target(body_bytes(chat_bodies()))
def _chat(raw: bytes) -> None:
    _parsed(raw, parse_chat)


test_chat_bodies, test_chat_bodies_long = _chat


@fuzz_target(body_bytes(completion_bodies()))
def _completion(raw: bytes) -> None:
    _parsed(raw, parse_completion)


test_completion_bodies, test_completion_bodies_long = _completion


@fuzz_target(body_bytes(chat_bodies() | completion_bodies()), st.booleans())
def _either(raw: bytes, chat: bool) -> None:
    """A body meant for one route sent to the other."""
    _parsed(raw, parse_chat if chat else parse_completion)


test_bodies_sent_to_the_other_route, test_bodies_sent_to_the_other_route_long = _either
