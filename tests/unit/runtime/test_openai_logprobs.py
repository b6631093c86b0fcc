"""Token log probabilities, mapped as Triton's OpenAI frontend maps them for a vLLM-style model:
the request fields (runtime.openai.schema), the model's inputs (triton_mapping), its `logprobs`
output read back (runtime.openai.logprobs) into OpenAI's completions and chat shapes, and the
offsets of a streamed choice (runtime.openai.generation)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.openai.answers import Answer
from runtime.openai.errors import OpenAIError
from runtime.openai.generation import Delta, End, Generation
from runtime.openai.logprobs import (
    TokenLogprob,
    chat_logprobs,
    completion_logprobs,
    parse_logprobs,
)
from runtime.openai.schema import GenerationRequest, Sampling, parse_chat, parse_completion
from runtime.openai.triton_mapping import ModelFace, generate_request, logprobs_of

_VLLM_INPUTS: dict[str, tuple[str, tuple[int, ...]]] = {
    "text_input": ("BYTES", (1,)),
    "stream": ("BOOL", (1,)),
    "sampling_parameters": ("BYTES", (1,)),
    "exclude_input_in_output": ("BOOL", (1,)),
    "return_logprobs": ("BOOL", (1,)),
}
VLLM = ModelFace("m", "1", _VLLM_INPUTS, frozenset({"text_output", "logprobs"}), vllm=True)
VLLM_NO_LOGPROBS = ModelFace("m", "1", _VLLM_INPUTS, frozenset({"text_output"}), vllm=True)
PYTHON_STYLE = ModelFace(
    "m", "1", {"text_input": ("BYTES", (-1,))}, frozenset({"text_output", "logprobs"}), vllm=False
)
CHAT = [{"role": "user", "content": "hi"}]


def _position(*tokens: tuple[str, float, int]) -> dict[str, dict[str, Any]]:
    """One position as vLLM's backend writes it: token id -> logprob, rank, decoded_token."""
    return {
        str(i): {"logprob": lp, "rank": rank, "decoded_token": text}
        for i, (text, lp, rank) in enumerate(tokens)
    }


def _response(text: str, positions: list[dict[str, Any]] | None) -> InferResponse:
    raw = json.dumps(positions).encode()
    return InferResponse(
        "m",
        "1",
        [
            InferTensor("text_output", "BYTES", (1,), np.array([text.encode()], dtype=np.object_)),
            InferTensor("logprobs", "BYTES", (1,), np.array([raw], dtype=np.object_)),
        ],
    )


def _inputs(request: InferRequest) -> dict[str, np.ndarray]:
    return {t.name: t.data for t in request.inputs}


# -- the request fields ----------------------------------------------------------------------


def test_completion_logprobs_is_how_many_top_tokens_and_zero_asks_for_none() -> None:
    assert parse_completion({"model": "m", "prompt": "x", "logprobs": 3}).logprobs == 3
    assert parse_completion({"model": "m", "prompt": "x", "logprobs": 0}).logprobs is None
    assert parse_completion({"model": "m", "prompt": "x"}).logprobs is None
    with pytest.raises(OpenAIError, match=r"'logprobs' = 7, must be in \[0, 5\]") as refused:
        parse_completion({"model": "m", "prompt": "x", "logprobs": 7})
    assert refused.value.status == 400 and refused.value.param == "logprobs"


def test_chat_logprobs_takes_top_logprobs_and_one_by_default() -> None:
    ask = {"model": "m", "messages": CHAT}
    assert parse_chat({**ask, "logprobs": True, "top_logprobs": 2}).logprobs == 2
    assert parse_chat({**ask, "logprobs": True, "top_logprobs": 0}).logprobs == 0
    assert parse_chat({**ask, "logprobs": True}).logprobs == 1  # Triton's frontend's default
    assert parse_chat({**ask, "logprobs": False}).logprobs is None
    with pytest.raises(OpenAIError, match=r"'top_logprobs' = 25, must be in \[0, 20\]"):
        parse_chat({**ask, "logprobs": True, "top_logprobs": 25})
    with pytest.raises(OpenAIError, match="'logprobs' must be of type bool"):
        parse_chat({**ask, "logprobs": 2})


@pytest.mark.parametrize("top", [0, 5])
def test_top_logprobs_without_logprobs_is_refused_in_tritons_words(top: int) -> None:
    with pytest.raises(OpenAIError) as refused:
        parse_chat({"model": "m", "messages": CHAT, "top_logprobs": top})
    assert str(refused.value) == "`top_logprobs` can only be used when `logprobs` is True"
    assert refused.value.param == "top_logprobs"


# -- the model's inputs ----------------------------------------------------------------------


def test_a_vllm_model_gets_return_logprobs_and_the_count_in_its_sampling_parameters() -> None:
    asked = generate_request(VLLM, "hi", Sampling(), stream=False, echo=False, logprobs=3)
    got = _inputs(asked)
    assert bool(got["return_logprobs"][0]) is True
    assert json.loads(got["sampling_parameters"][0])["logprobs"] == 3
    plain = _inputs(generate_request(VLLM, "hi", Sampling(), stream=False, echo=False))
    assert bool(plain["return_logprobs"][0]) is False
    assert "logprobs" not in json.loads(plain["sampling_parameters"][0])


@pytest.mark.parametrize("face", [VLLM_NO_LOGPROBS, PYTHON_STYLE])
def test_a_model_without_a_vllm_logprobs_output_is_refused(face: ModelFace) -> None:
    with pytest.raises(OpenAIError) as refused:
        generate_request(face, "hi", Sampling(), stream=False, echo=False, logprobs=1)
    assert refused.value.status == 400 and refused.value.param == "logprobs"
    assert "logprobs are currently available only for the vLLM backend" in str(refused.value)


# -- the model's output ----------------------------------------------------------------------


def test_the_sampled_token_is_the_first_and_the_top_ones_go_by_rank() -> None:
    # A sampled token outside the top 2 (rank 7): vLLM writes it first, then the top ones.
    raw = json.dumps([_position(("z", -4.0, 7), ("a", -0.5, 1), ("b", -1.0, 2))])
    (token,) = parse_logprobs("m", raw, top=2)
    assert token == TokenLogprob("z", -4.0, (("a", -0.5), ("b", -1.0)))
    assert parse_logprobs("m", raw, top=0)[0].top == ()


def test_null_and_empty_positions_carry_no_tokens_and_infinity_is_floored() -> None:
    assert parse_logprobs("m", "null", top=1) == []
    raw = '[{}, {"3": {"logprob": -Infinity, "rank": 9, "decoded_token": "q"}}]'
    assert parse_logprobs("m", raw, top=1) == [TokenLogprob("q", -9999.0, (("q", -9999.0),))]


@pytest.mark.parametrize(
    "raw", ["not json", '{"a": 1}', "[[1]]", '[{"1": {"logprob": "x", "decoded_token": "a"}}]']
)
def test_logprobs_in_another_shape_are_the_models_error(raw: str) -> None:
    with pytest.raises(OpenAIError, match="unknown shape") as refused:
        parse_logprobs("m", raw, top=1)
    assert refused.value.status == 500


def test_each_response_element_is_read_in_order() -> None:
    response = _response("ab", [_position(("a", -0.1, 1)), _position(("b", -0.2, 1))])
    assert [t.token for t in logprobs_of(response, top=1)] == ["a", "b"]
    assert logprobs_of(InferResponse("m", "1", []), top=1) == []


# -- OpenAI's shapes -------------------------------------------------------------------------


def test_completion_shape_counts_offsets_from_where_the_first_token_starts() -> None:
    tokens = [TokenLogprob("Hé", -0.5, (("Hé", -0.5), ("x", -2.0))), TokenLogprob("!", -1.0, ())]
    assert completion_logprobs(tokens, offset=4) == {
        "tokens": ["Hé", "!"],
        "token_logprobs": [-0.5, -1.0],
        "text_offset": [4, 6],
        "top_logprobs": [{"Hé": -0.5, "x": -2.0}, {}],
    }


def test_chat_shape_carries_utf8_bytes() -> None:
    doc = chat_logprobs([TokenLogprob("é", -0.25, (("é", -0.25),))])
    assert doc == {
        "content": [
            {
                "token": "é",
                "logprob": -0.25,
                "bytes": [0xC3, 0xA9],
                "top_logprobs": [{"token": "é", "logprob": -0.25, "bytes": [0xC3, 0xA9]}],
            }
        ]
    }


def test_answers_without_logprobs_asked_say_null() -> None:
    answer = Answer.new("m", 0, chat=False)
    assert answer.whole(["x"], ["stop"], None)["choices"][0]["logprobs"] is None
    assert answer.chunk(0, "x")["choices"][0]["logprobs"] is None


# -- a streamed choice -----------------------------------------------------------------------


class Steps:
    """Answers one token per response, each with its logprobs position."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens

    async def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        for i, token in enumerate(self.tokens):
            yield _response(token, [_position((token, -float(i), 1))])


async def test_streamed_deltas_carry_their_tokens_and_offsets_after_the_echoed_prompt() -> None:
    inputs: dict[str, tuple[str, tuple[int, ...]]] = {
        "text_input": ("BYTES", (1,)),
        "sampling_parameters": ("BYTES", (1,)),
    }
    face = ModelFace("m", "1", inputs, frozenset({"text_output", "logprobs"}), vllm=True)
    asked = GenerationRequest(
        model="m", sampling=Sampling(max_tokens=3), prompts=("pr",), logprobs=1, echo=True
    )
    events = [e async for e in Generation(Steps(["a", "bc", "d"]), face, asked, ("pr",)).events()]
    deltas = [e for e in events if isinstance(e, Delta)]
    assert (deltas[0].text, deltas[0].logprobs) == ("pr", None)  # the echo: no tokens
    assert [(d.text, d.offset, [t.token for t in d.logprobs or ()]) for d in deltas[1:]] == [
        ("a", 2, ["a"]),
        ("bc", 3, ["bc"]),
        ("d", 5, ["d"]),
    ]
    assert isinstance(events[-1], End)


@pytest.mark.parametrize(
    "raw",
    [
        "[" * 100_000,  # found by fuzzing: nested past the parser (RecursionError)
        '[{"1": {"logprob": 1' + "0" * 400 + ', "decoded_token": "a"}}]',  # found by fuzzing:
        # an integer past a float's range (OverflowError)
        '[{"1": {"logprob": Infinity, "decoded_token": "a"}}]',  # no JSON answer carries it
        '[{"1": {"logprob": -1, "decoded_token": "\\ud800"}}]',  # a token whose UTF-8 `bytes`
        # are none (UnicodeEncodeError writing the chat shape)
    ],
    ids=["deep", "huge-integer", "infinity", "lone-surrogate"],
)
def test_logprobs_no_answer_can_carry_are_the_models_error(raw: str) -> None:
    """Each of these left the reader (or the chat shape after it) as another exception, a 500
    "internal server error" that named nothing; now a 500 naming the model and the shape."""
    with pytest.raises(OpenAIError, match="model 'm' answered 'logprobs' in an unknown shape"):
        parse_logprobs("m", raw, top=1)
    huge_negative = '[{"1": {"logprob": -1' + "0" * 400 + ', "decoded_token": "a"}}]'
    assert parse_logprobs("m", huge_negative, top=1)[0].logprob == -9999.0  # floored
