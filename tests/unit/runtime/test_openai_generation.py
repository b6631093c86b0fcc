"""One generation request's choices on a fake model service (runtime.openai.generation): text
deltas in order, stop sequences cut even across token boundaries, usage, n choices, errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from runtime.errors import ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.openai.generation import Delta, End, Generation, StopScan
from runtime.openai.schema import GenerationRequest, Sampling
from runtime.openai.triton_mapping import ModelFace

FACE = ModelFace(
    name="m",
    version="1",
    inputs={"text_input": ("BYTES", (1,)), "seed": ("UINT64", (1,))},
    outputs=frozenset({"text_output", "num_input_tokens", "num_output_tokens"}),
    vllm=False,
)


def _response(text: str, prompt: int, generated: int) -> InferResponse:
    return InferResponse(
        "m",
        "1",
        [
            InferTensor("text_output", "BYTES", (1,), np.array([text.encode()], dtype=np.object_)),
            InferTensor("num_input_tokens", "INT32", (1,), np.array([prompt], dtype=np.int32)),
            InferTensor("num_output_tokens", "INT32", (1,), np.array([generated], dtype=np.int32)),
        ],
    )


class Tokens:
    """Answers each request with `tokens`, one response each; records requests and closes."""

    def __init__(self, tokens: list[str], *, fail_after: int | None = None) -> None:
        self.tokens = tokens
        self.fail_after = fail_after
        self.seeds: list[int] = []
        self.closed = 0
        self.sent = 0

    async def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        seed = {t.name: t.data for t in request.inputs}.get("seed")
        if seed is not None:
            self.seeds.append(int(seed.reshape(-1)[0]))
        try:
            for i, token in enumerate(self.tokens):
                if i == self.fail_after:
                    raise ServingError("the model broke")
                self.sent += 1
                yield _response(token, 2, 1)
                await asyncio.sleep(0)
        finally:
            self.closed += 1


async def _run(generation: Generation) -> list[Delta | End]:
    return [event async for event in generation.events()]


def _ask(**fields: object) -> GenerationRequest:
    sampling = fields.pop("sampling", Sampling(max_tokens=3))
    return GenerationRequest(model="m", sampling=sampling, prompts=("p",), **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("pieces", "stops", "expected"),
    [
        (["ab", "c<", "/s", ">tail"], ("</s>",), "abc"),  # split across three tokens
        (["ab", "<x", "y"], ("</s>",), "ab<xy"),  # held back, then released at the end
        (["xSTOPy"], ("STOP", "x"), ""),  # the earliest of several wins
    ],
)
def test_stop_scan_cuts_at_the_first_stop_sequence(
    pieces: list[str], stops: tuple[str, ...], expected: str
) -> None:
    scan = StopScan(stops)
    out = ""
    for piece in pieces:
        out += scan.feed(piece)
        if scan.stopped:
            break
    if not scan.stopped:
        out += scan.flush()
    assert out == expected


async def test_deltas_then_end_with_usage_and_length_finish() -> None:
    generation = Generation(Tokens(["a ", "b ", "c "]), FACE, _ask(), ("p",))
    events = await _run(generation)
    assert events == [Delta(0, "a "), Delta(0, "b "), Delta(0, "c "), End(0, "length")]
    assert generation.usage.to_json() == {
        "prompt_tokens": 2,  # once, not once per response
        "completion_tokens": 3,
        "total_tokens": 5,
    }


async def test_a_stop_sequence_ends_the_models_request_early() -> None:
    model = Tokens(["a ", "b ", "STOP", "c ", "d "])
    sampling = Sampling(max_tokens=5, stop=("STOP",))
    events = await _run(Generation(model, FACE, _ask(sampling=sampling), ("p",)))
    assert events == [Delta(0, "a "), Delta(0, "b "), End(0, "stop")]
    assert model.sent == 3 and model.closed == 1  # nothing past the stop was asked for


async def test_n_choices_each_their_own_seed_and_every_one_ends() -> None:
    model = Tokens(["x"])
    ask = _ask(n=3, sampling=Sampling(max_tokens=4, seed=10))
    generation = Generation(model, FACE, ask, ("p",))
    events = await _run(generation)
    assert sorted(e.index for e in events if isinstance(e, End)) == [0, 1, 2]
    assert sorted(model.seeds) == [10, 11, 12]
    assert generation.usage.prompt_tokens == 2  # one prompt
    assert generation.usage.completion_tokens == 3


async def test_a_models_error_ends_the_request_and_closes_every_choice() -> None:
    model = Tokens(["a", "b", "c"], fail_after=1)
    generation = Generation(model, FACE, _ask(n=2), ("p",))
    with pytest.raises(ServingError, match="the model broke"):
        await _run(generation)
    assert model.closed == 2


@pytest.mark.parametrize("n", [1, 3])
async def test_leaving_early_ends_every_choices_request(n: int) -> None:
    """The client went away after the first token: no model keeps generating for it."""
    model = Tokens(["a", "b", "c", "d"])
    events = Generation(model, FACE, _ask(n=n, sampling=Sampling(max_tokens=4)), ("p",)).events()
    assert isinstance(await anext(events), Delta)
    await events.aclose()  # type: ignore[attr-defined]
    assert model.closed == n
    assert model.sent < 4 * n
