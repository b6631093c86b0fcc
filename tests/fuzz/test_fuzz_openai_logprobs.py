"""Fuzz the reading of a vLLM-style model's `logprobs` output (runtime.openai.logprobs).

The model's answer is untrusted too (a user's model.py writes it): any JSON, the right shape
with wrong values (huge, non-finite, of the wrong type; tokens that are lone surrogates), or
not JSON. Property: `parse_logprobs` gives tokens or raises the module's own `OpenAIError`
(a 500 naming the model); the tokens it gives make both OpenAI shapes as strict JSON (no NaN,
no infinity) with each token's UTF-8 `bytes`; never another exception.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from runtime.openai.errors import OpenAIError
from runtime.openai.logprobs import chat_logprobs, completion_logprobs, parse_logprobs
from tests.fuzz.openai_bodies import hostile, numbers
from tests.fuzz.targets import fuzz_target, json_values

_token = st.fixed_dictionaries(
    {},
    optional={
        "logprob": numbers | hostile,
        "rank": st.integers(-2, 30) | hostile,
        "decoded_token": st.text(max_size=4) | st.sampled_from(["\ud800", "x\udfff", ""]) | hostile,
    },
)
_position = st.dictionaries(st.integers(0, 1 << 20).map(str), _token | hostile, max_size=4)
_documents = st.lists(_position | hostile, max_size=5) | json_values | st.none()


@st.composite
def _raw(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.text(max_size=30))
    if kind == 1:
        return "[" * draw(st.integers(1, 100_000))
    if kind == 2:  # nested as deep as the parser allows, or past it
        depth = draw(st.integers(1, 5_000))
        return "[" * depth + "]" * depth
    return json.dumps(draw(_documents))


@fuzz_target(_raw(), st.integers(0, 20), st.integers(0, 1 << 20))
def _parse(raw: str, top: int, offset: int) -> None:
    try:
        tokens = parse_logprobs("m", raw, top=top)
    except OpenAIError as exc:
        assert exc.status == 500 and "'m'" in exc.message
        return
    shapes: list[Any] = [chat_logprobs(tokens), completion_logprobs(tokens, offset=offset)]
    json.dumps(shapes, allow_nan=False)
    for token in tokens:
        assert len(token.top) <= top


test_logprobs_output, test_logprobs_output_long = _parse
