"""Logprobs through the `openai` client against a real `thaw serve` of a vLLM-style causal LM
(tests/fixtures/openai_models.py `tiny_gpt_vllm`): each token's log probability is the model's
own, run directly, streamed and whole alike; a model without a `logprobs` output refuses."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from benchmarks.tiny_gpt import TinyLM
from tests.fixtures import openai_models
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

MODEL = "tiny_gpt_vllm"
PROMPT = "The cluster woke up and"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("logprobs_repo")
    openai_models.make_tiny_gpt_vllm(repo, MODEL)
    openai_models.make_echo_llm(repo)
    return repo


@pytest.fixture(scope="module")
def client(repo: Path) -> Iterator[openai.OpenAI]:
    serve = ServeProcess(repo)
    try:
        serve.wait_ready()
        with openai.OpenAI(base_url=serve.url + "/v1", api_key="-", max_retries=0) as c:
            yield c
    finally:
        serve.stop()


@pytest.fixture(scope="module")
def direct(repo: Path) -> TinyLM:
    return TinyLM.load(repo / MODEL / "1")


def _decoded(token: int) -> str:
    return bytes([token]).decode("utf-8", errors="replace")


def test_completion_logprobs_are_the_models_own_streamed_and_whole(
    client: openai.OpenAI, direct: TinyLM
) -> None:
    steps = list(direct.steps(PROMPT, max_tokens=8, top=3))
    whole = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=3
    )
    lp = whole.choices[0].logprobs
    assert lp is not None and lp.tokens is not None and lp.token_logprobs is not None
    assert lp.tokens == [_decoded(s.token) for s in steps]
    assert all(
        math.isclose(a, s.logprob, abs_tol=1e-5)
        for a, s in zip(lp.token_logprobs, steps, strict=True)
    )
    assert lp.top_logprobs is not None
    assert [list(top) for top in lp.top_logprobs] == [
        list(dict.fromkeys(_decoded(t) for t, _ in s.top)) for s in steps
    ]
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(steps))]
    chunks = list(
        client.completions.create(
            model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=3, stream=True
        )
    )
    streamed = [c.choices[0].logprobs for c in chunks if c.choices[0].logprobs]
    assert [t for s in streamed for t in s.tokens or []] == lp.tokens
    assert [o for s in streamed for o in s.text_offset or []] == lp.text_offset
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text


def test_echoed_completion_offsets_start_after_the_prompt(client: openai.OpenAI) -> None:
    answer = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=3, temperature=0, logprobs=1, echo=True
    )
    choice = answer.choices[0]
    assert choice.text.startswith(PROMPT)
    assert choice.logprobs is not None and choice.logprobs.text_offset is not None
    assert choice.logprobs.text_offset[0] == len(PROMPT)


def test_chat_logprobs_with_top_logprobs(client: openai.OpenAI, direct: TinyLM) -> None:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    steps = list(direct.steps("user: hi\nassistant:", max_tokens=6, top=2))
    answer = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=6, temperature=0, logprobs=True, top_logprobs=2
    )
    content = answer.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and len(content) == len(steps)
    for token, step in zip(content, steps, strict=True):
        assert token.token == _decoded(step.token)
        assert token.bytes == list(_decoded(step.token).encode())
        assert math.isclose(token.logprob, step.logprob, abs_tol=1e-5)
        assert [t.token for t in token.top_logprobs] == [_decoded(t) for t, _ in step.top]
    plain = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=6, temperature=0
    )
    assert plain.choices[0].logprobs is None


def test_out_of_range_and_top_logprobs_alone_are_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match=r"'logprobs' = 6, must be in \[0, 5\]"):
        client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2, logprobs=6)
    with pytest.raises(openai.BadRequestError, match="can only be used when `logprobs` is True"):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], top_logprobs=2
        )


def test_a_model_without_a_logprobs_output_refuses(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="only for the vLLM backend") as refused:
        client.completions.create(model="echo_llm", prompt="a b", max_tokens=2, logprobs=1)
    assert refused.value.body["param"] == "logprobs"  # type: ignore[index]


def test_the_model_applies_stop_strings_itself(client: openai.OpenAI, direct: TinyLM) -> None:
    text = "".join(direct.stream(PROMPT, max_tokens=12))
    stop = text[4:6]
    answer = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, stop=[stop]
    )
    assert answer.choices[0].text == text[: text.find(stop)]
    assert answer.choices[0].finish_reason == "stop"
