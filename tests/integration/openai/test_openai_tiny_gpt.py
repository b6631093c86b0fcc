"""A real causal LM (benchmarks/tiny_gpt.py: GPT-2's architecture, random weights, byte tokens)
served by `thaw serve` as a decoupled Python model, asked through the `openai` client: its
streamed and whole answers are the same model's output run directly, token by token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from benchmarks.openai_ttft import MODEL, build_repo
from benchmarks.tiny_gpt import TinyLM
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

PROMPT = "The cluster woke up and"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repo(tmp_path_factory.mktemp("tiny_gpt"), layers=2, width=64, threads=1)


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


def test_greedy_text_streamed_and_whole_is_the_models_own(
    client: openai.OpenAI, direct: TinyLM
) -> None:
    tokens = 24
    expected = list(direct.stream(PROMPT, max_tokens=tokens))
    whole = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=tokens, temperature=0)
    assert whole.choices[0].text == "".join(expected)
    assert whole.usage is not None
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (len(PROMPT), tokens)
    assert whole.choices[0].finish_reason == "length"
    chunks = list(
        client.completions.create(
            model=MODEL, prompt=PROMPT, max_tokens=tokens, temperature=0, stream=True
        )
    )
    texts = [c.choices[0].text for c in chunks if c.choices[0].text]
    assert texts == [piece for piece in expected if piece]  # a chunk per decoded token


def test_seeded_sampling_reproduces_and_n_choices_take_the_next_seeds(
    client: openai.OpenAI, direct: TinyLM
) -> None:
    answer = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=12, temperature=1.0, seed=5, n=2
    )
    by_index = {c.index: c.text for c in answer.choices}
    for index, seed in ((0, 5), (1, 6)):
        sampled = "".join(direct.stream(PROMPT, max_tokens=12, temperature=1.0, seed=seed))
        assert by_index[index] == sampled
    assert by_index[0] != by_index[1]


def test_chat_through_the_fallback_template(client: openai.OpenAI, direct: TinyLM) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0
    )
    expected = "".join(direct.stream("user: hi\nassistant:", max_tokens=8))
    assert answer.choices[0].message.content == expected
