"""The `openai` client, unchanged, through a real `thaw up` with its models at zero: the model
list answers without waking anything; a completion, a streamed chat and an embeddings request
each wake their model and get their answer; the stream is passed on token by token."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures import openai_models
from tests.fixtures.up_process import UpProcess, make_broken, with_params

pytestmark = pytest.mark.integration

MODELS = ("broken_llm", "chat_llm", "echo_llm", "embed_text", "not_generative", "stream_llm")
MAX_BODY_BYTES = 65536
DEFAULT_MAX_TOKENS = 5  # thaw up's --default-max-tokens, which each replica it starts gets


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("openai_up_repo")
    openai_models.make_echo_llm(repo)
    openai_models.make_echo_llm(repo, "chat_llm")
    openai_models.make_echo_llm(repo, "stream_llm")
    openai_models.make_embed_text(repo)
    openai_models.make_not_generative(repo)
    make_broken(repo, "broken_llm")  # its initialize fails: every wake-up fails
    for name in MODELS:
        with_params(repo / name, max_replicas=1)
    server = UpProcess(
        repo,
        "--warm-pool", "2",
        "--preload-frameworks", "",
        "--no-image-build",
        "--cache", str(repo.parent / "cache"),
        "--max-body-bytes", str(MAX_BODY_BYTES),
        "--default-max-tokens", str(DEFAULT_MAX_TOKENS),
    )  # fmt: skip
    yield server
    server.stop()


@pytest.fixture
def client(up: UpProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=up.url + "/v1", api_key="none", max_retries=0, timeout=120) as c:
        yield c


def _replicas(up: UpProcess, model: str) -> int:
    return len(up.model(model)["replicas"])


def _first_token_count(up: UpProcess, model: str, cold: str) -> float:
    """How many times to first token `thaw up` recorded for `model` (cold: "true"/"false")."""
    for family in text_string_to_metric_families(up.metrics()):
        for sample in family.samples:
            if sample.name == "thaw_time_to_first_token_seconds_count" and sample.labels == {
                "model": model,
                "cold": cold,
            }:
                return sample.value
    return 0.0


def _post(up: UpProcess, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(up.url + path, data=body)
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_model_list_answers_from_the_repository_without_waking(
    up: UpProcess, client: openai.OpenAI
) -> None:
    assert sorted(m.id for m in client.models.list()) == list(MODELS)
    assert client.models.retrieve("chat_llm").id == "chat_llm"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")
    assert all(_replicas(up, name) == 0 for name in MODELS)


def test_a_completion_wakes_its_model_from_zero(up: UpProcess, client: openai.OpenAI) -> None:
    assert _replicas(up, "echo_llm") == 0
    answer = client.completions.create(model="echo_llm", prompt="wake up", max_tokens=3)
    assert answer.choices[0].text == "wake up wake "
    assert answer.usage is not None and answer.usage.total_tokens == 5
    assert _replicas(up, "echo_llm") == 1
    client.completions.create(model="echo_llm", prompt="again", max_tokens=1)
    assert _first_token_count(up, "echo_llm", "true") == 1
    assert _first_token_count(up, "echo_llm", "false") == 1
    status = up.model("echo_llm")  # the status page's figures, beside the metric's
    assert status["first_token_cold_s"] > 0 and status["first_token_warm_s"] > 0


def test_the_woken_replica_takes_thaw_ups_default_max_tokens(client: openai.OpenAI) -> None:
    answer = client.completions.create(model="echo_llm", prompt="a b")
    assert answer.usage is not None and answer.usage.completion_tokens == DEFAULT_MAX_TOKENS
    assert answer.choices[0].text == "a b a b a "


def test_a_streamed_chat_wakes_its_model_and_streams(up: UpProcess, client: openai.OpenAI) -> None:
    assert _replicas(up, "chat_llm") == 0
    stream = client.chat.completions.create(
        model="chat_llm",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "user: hi assistant: user: "
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_tokens_pass_the_activator_as_they_come(
    up: UpProcess, client: openai.OpenAI, tmp_path: Path
) -> None:
    """The model holds its second token until the test has seen the first: through an
    activator that buffered the stream, the first would come only after the model gave up
    (60 s), with its error. The time to first token is recorded then too, while the model
    still holds the rest: cold, since the model was at zero."""
    gate = tmp_path / "first-token-seen"
    assert _replicas(up, "stream_llm") == 0
    stream = client.completions.create(
        model="stream_llm", prompt=f"go WAIT={gate}", max_tokens=3, stream=True
    )
    with stream:
        chunks = iter(stream)
        first = next(chunks)
        assert first.choices[0].text == "go "
        up.wait_for(
            lambda: _first_token_count(up, "stream_llm", "true") == 1, 30, "the TTFT sample"
        )
        gate.touch()
        rest = "".join(c.choices[0].text for c in chunks if c.choices)
    assert rest == f"WAIT={gate} go "


def test_embeddings_wake_their_model(up: UpProcess, client: openai.OpenAI) -> None:
    assert _replicas(up, "embed_text") == 0
    answer = client.embeddings.create(model="embed_text", input=["a", "b", "c"])
    assert [len(d.embedding) for d in answer.data] == [openai_models.EMBED_DIMS] * 3


def test_refusals_in_openais_shape_at_the_front_door(up: UpProcess, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert unknown.value.code == "model_not_found"
    for body in (b"{oops", b"[]", b'{"model": 3}', b'{"prompt": "x"}'):
        status, doc = _post(up, "/v1/completions", body)
        assert status == 400, (body, doc)
        assert set(doc["error"]) == {"message", "type", "param", "code"}
    # Named as `thaw serve` names it: a body without a model, a name no model can have.
    status, doc = _post(up, "/v1/completions", b'{"prompt": "x"}')
    assert doc["error"]["param"] == "model"
    with pytest.raises(openai.NotFoundError) as too_long:
        client.completions.create(model="m" * 600, prompt="x")
    assert too_long.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError) as missing:  # a route not served: OpenAI's shape
        client.responses.create(model="echo_llm", input="hi")
    assert isinstance(missing.value.body, dict)
    assert "Invalid URL (POST /v1/responses)" in missing.value.message
    # Refused by the replica (after waking it), in the same shape, through the activator.
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="not_generative", prompt="x")
    assert refused.value.param == "model"
    # A lone surrogate (`"\\ud800"`, which the `openai` client cannot send) is a clear 400.
    status, doc = _post(up, "/v1/completions", b'{"model": "echo_llm", "prompt": "\\ud800"}')
    assert status == 400 and "lone surrogate" in doc["error"]["message"], doc


def test_a_wake_that_fails_and_a_body_too_large_are_openai_errors(
    up: UpProcess, client: openai.OpenAI
) -> None:
    with pytest.raises(openai.InternalServerError) as failed:  # 503, the model's own reason
        client.completions.create(model="broken_llm", prompt="x")
    assert failed.value.status_code == 503
    assert "not FIXED" in str(failed.value)
    error = failed.value.body
    assert isinstance(error, dict) and error["type"] == "server_error"
    huge = json.dumps({"model": "echo_llm", "prompt": "x" * MAX_BODY_BYTES}).encode()
    status, doc = _post(up, "/v1/completions", huge)
    assert status == 413 and set(doc["error"]) == {"message", "type", "param", "code"}
    # ... and the front door still serves.
    assert client.completions.create(model="echo_llm", prompt="ok", max_tokens=1).choices
