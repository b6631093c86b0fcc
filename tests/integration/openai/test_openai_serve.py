"""The `openai` client, unchanged, against a real `thaw serve`: completions, chat (streamed and
not), embeddings and the model list; hostile bodies refused in OpenAI's error shape while the
server keeps serving."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import openai
import pytest

from tests.fixtures import openai_models
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

MAX_BODY_BYTES = 65536
DEFAULT_MAX_TOKENS = 6  # the server's --default-max-tokens (Triton's frontend's default: 16)
# A template unlike the fallback, so the tests can tell which one made the prompt.
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>"
    "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("openai_repo")
    openai_models.make_echo_llm(repo)
    openai_models.make_echo_llm(repo, "templated_llm", chat_template=TEMPLATE)
    openai_models.make_params_vllm(repo)
    openai_models.make_embed_text(repo)
    openai_models.make_not_generative(repo)
    serve = ServeProcess(
        repo,
        "--max-body-bytes", str(MAX_BODY_BYTES),
        "--default-max-tokens", str(DEFAULT_MAX_TOKENS),
    )  # fmt: skip
    serve.wait_ready()
    yield serve
    serve.stop()


@pytest.fixture
def client(server: ServeProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0) as c:
        yield c


def _post(server: ServeProcess, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        server.url + path, data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_model_list_names_every_loaded_model(client: openai.OpenAI) -> None:
    ids = sorted(m.id for m in client.models.list())
    assert ids == ["echo_llm", "embed_text", "not_generative", "params_vllm", "templated_llm"]
    assert client.models.retrieve("echo_llm").owned_by == "Triton Inference Server"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no_such_model")


def test_a_completion_carries_the_text_the_finish_reason_and_usage(client: openai.OpenAI) -> None:
    answer = client.completions.create(model="echo_llm", prompt="one two three", max_tokens=5)
    choice = answer.choices[0]
    assert choice.text == "one two three one two "
    assert choice.finish_reason == "length"  # it ran to max_tokens
    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (3, 5)
    assert answer.usage.total_tokens == 8


def test_a_streamed_completion_arrives_token_by_token(client: openai.OpenAI) -> None:
    chunks = list(
        client.completions.create(
            model="echo_llm",
            prompt="alpha beta",
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    texts = [c.choices[0].text for c in chunks if c.choices and c.choices[0].text]
    assert texts == ["alpha ", "beta ", "alpha ", "beta "]  # one chunk per token
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 4 and chunks[-1].usage.prompt_tokens == 2


def test_chat_uses_the_models_chat_template(client: openai.OpenAI) -> None:
    messages: Any = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
    ]
    answer = client.chat.completions.create(model="templated_llm", messages=messages, max_tokens=1)
    # echo_llm repeats the prompt's first word: the rendered template's.
    assert answer.choices[0].message.content == "<s><system>be "
    assert answer.choices[0].message.role == "assistant"
    fallback = client.chat.completions.create(model="echo_llm", messages=messages, max_tokens=3)
    assert fallback.choices[0].message.content == "system: be brief "


def test_a_streamed_chat_starts_with_the_role_and_ends_with_done(
    client: openai.OpenAI,
) -> None:
    stream = client.chat.completions.create(
        model="echo_llm",
        messages=[{"role": "user", "content": "tick"}],
        max_tokens=3,
        stream=True,
    )
    chunks = list(stream)  # the client stops at `data: [DONE]`; a missing one would hang it
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert content == "user: tick assistant: "
    assert chunks[-1].choices[0].finish_reason == "length"


def test_n_choices_and_stop_sequences(client: openai.OpenAI) -> None:
    answer = client.completions.create(model="echo_llm", prompt="a b c d", max_tokens=8, n=3)
    assert sorted(c.index for c in answer.choices) == [0, 1, 2]
    assert {c.text for c in answer.choices} == {"a b c d a b c d "}
    assert answer.usage is not None and answer.usage.completion_tokens == 24
    # echo_llm takes no stop words: the server cuts the text at the first stop sequence,
    # streamed or not, and says the choice stopped.
    cut = client.completions.create(model="echo_llm", prompt="a b c d", max_tokens=8, stop=["c "])
    assert (cut.choices[0].text, cut.choices[0].finish_reason) == ("a b ", "stop")
    streamed = client.completions.create(
        model="echo_llm", prompt="a b c d", max_tokens=8, stop="c", stream=True
    )
    parts = [c.choices[0] for c in streamed]
    assert "".join(p.text for p in parts) == "a b "
    assert parts[-1].finish_reason == "stop"


def test_sampling_fields_reach_a_vllm_style_model_as_its_json(client: openai.OpenAI) -> None:
    answer = client.completions.create(
        model="params_vllm",
        prompt="x",
        max_tokens=7,
        temperature=0.25,
        top_p=0.5,
        seed=11,
        stop=["END"],
        echo=True,
    )
    doc = json.loads(answer.choices[0].text)
    assert doc["sampling_parameters"] == {
        "max_tokens": 7,
        "temperature": 0.25,
        "top_p": 0.5,
        "seed": 11,
        "stop": ["END"],
    }
    assert doc["exclude_input_in_output"] is False  # echo=True


def test_a_request_without_max_tokens_gets_the_servers_default(client: openai.OpenAI) -> None:
    """`--default-max-tokens` (Triton's OpenAI frontend's flag) is the limit sent for a request
    that sets neither `max_tokens` nor `max_completion_tokens`; the request's own wins."""
    answer = client.completions.create(model="params_vllm", prompt="x")
    doc = json.loads(answer.choices[0].text)
    assert doc["sampling_parameters"]["max_tokens"] == DEFAULT_MAX_TOKENS
    messages: Any = [{"role": "user", "content": "a"}]
    chat = client.chat.completions.create(model="echo_llm", messages=messages)
    assert chat.usage is not None and chat.usage.completion_tokens == DEFAULT_MAX_TOKENS
    assert chat.choices[0].finish_reason == "length"
    stream = client.chat.completions.create(
        model="echo_llm", messages=messages, stream=True, stream_options={"include_usage": True}
    )
    usage = list(stream)[-1].usage
    assert usage is not None and usage.completion_tokens == DEFAULT_MAX_TOKENS
    own = client.chat.completions.create(
        model="echo_llm", messages=messages, max_completion_tokens=2
    )
    assert own.usage is not None and own.usage.completion_tokens == 2


def test_seeds_are_signed_64_bit_and_n_choices_wrap_within_them(client: openai.OpenAI) -> None:
    """OpenAI's (and Triton's frontend's) seed range: a larger one reached vLLM-style models,
    whose torch generator refused it (or `seed + 1` for a second choice) with a 500."""
    answer = client.completions.create(model="params_vllm", prompt="x", seed=2**63 - 1, n=2)
    seeds = {c.index: json.loads(c.text)["sampling_parameters"]["seed"] for c in answer.choices}
    assert seeds == {0: 2**63 - 1, 1: -(2**63)}
    for seed in (2**63, 2**64 - 1, -(2**63) - 1):
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(model="params_vllm", prompt="x", seed=seed)
        assert refused.value.param == "seed"


def test_embeddings_as_floats_and_base64(client: openai.OpenAI) -> None:
    answer = client.embeddings.create(model="embed_text", input=["ab", "cd"])
    vectors = [np.array(d.embedding) for d in answer.data]
    assert [d.index for d in answer.data] == [0, 1]
    assert len(vectors[0]) == openai_models.EMBED_DIMS
    np.testing.assert_allclose([np.linalg.norm(v) for v in vectors], [1.0, 1.0], rtol=1e-6)
    assert not np.allclose(vectors[0], vectors[1])
    raw = client.embeddings.with_raw_response.create(
        model="embed_text", input="ab", encoding_format="base64"
    )
    encoded = json.loads(raw.text)["data"][0]["embedding"]
    decoded = np.frombuffer(base64.b64decode(encoded), dtype="<f4")
    np.testing.assert_allclose(decoded, vectors[0], rtol=1e-6)


def test_refusals_in_openais_error_shape(client: openai.OpenAI, server: ServeProcess) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        client.completions.create(model="no_such_model", prompt="x")
    assert unknown.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as not_generative:
        client.completions.create(model="not_generative", prompt="x")
    assert not_generative.value.param == "model"
    with pytest.raises(openai.BadRequestError) as not_embedding:
        client.embeddings.create(model="echo_llm", input="x")
    assert "not an embedding model" in str(not_embedding.value)
    with pytest.raises(openai.BadRequestError) as huge_n:
        client.completions.create(model="echo_llm", prompt="x", n=10_000)
    assert huge_n.value.param == "n"
    hostile = [
        b"{not json",
        b"[1, 2]",
        b'{"model": "echo_llm", "prompt": 7}',
        b'{"model": "echo_llm", "prompt": "x", "max_tokens": "many"}',
        b'{"model": "echo_llm", "prompt": "x", "temperature": 9}',
        b'{"model": "echo_llm", "prompt": "x", "stream": "yes"}',
        b'{"model": "echo_llm", "prompt": "x", "stop": [1]}',
        b'{"model": 5, "prompt": "x"}',
        b'{"model": "echo_llm", "prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    ]
    for body in hostile:
        status, doc = _post(server, "/v1/completions", body)
        assert status == 400, (body[:60], doc)
        assert set(doc["error"]) == {"message", "type", "param", "code"}
        assert doc["error"]["type"] == "invalid_request_error"
    status, doc = _post(server, "/v1/chat/completions", b'{"model": "echo_llm", "messages": []}')
    assert (status, doc["error"]["param"]) == (400, "messages")
    huge = json.dumps({"model": "echo_llm", "prompt": "x" * MAX_BODY_BYTES}).encode()
    status, doc = _post(server, "/v1/completions", huge)
    assert status == 413 and set(doc["error"]) == {"message", "type", "param", "code"}
    # ... and the server still serves.
    assert client.completions.create(model="echo_llm", prompt="ok", max_tokens=1).choices[0].text


def test_a_lone_surrogate_is_a_400_not_a_crash(client: openai.OpenAI, server: ServeProcess) -> None:
    """JSON lets a client escape half a surrogate pair (`"\\ud800"`; JavaScript's
    JSON.stringify writes one for a broken string); it is no Unicode text, so no model can be
    sent it. The `openai` client cannot send one (it encodes the body as UTF-8 first): urllib
    does."""
    bodies = [
        ("/v1/completions", b'{"model": "echo_llm", "prompt": "\\ud800 x"}'),
        ("/v1/completions", b'{"model": "echo_llm", "prompt": "x", "stop": ["\\udfff"]}'),
        (
            "/v1/chat/completions",
            b'{"model": "echo_llm", "messages": [{"role": "user", "content": "a\\ud83d"}]}',
        ),
        ("/v1/embeddings", b'{"model": "embed_text", "input": ["ok", "\\ud800"]}'),
        ("/v1/completions", b'{"model": "echo_llm", "prompt": "x", "\\ud800": 1}'),
    ]
    for path, body in bodies:
        status, doc = _post(server, path, body)
        assert status == 400, (path, body, doc)
        assert doc["error"]["type"] == "invalid_request_error"
        assert "lone surrogate" in doc["error"]["message"]
    # A whole pair is one character, and the server still serves.
    pair = b'{"model": "echo_llm", "prompt": "\\ud83d\\ude00", "max_tokens": 1}'
    status, doc = _post(server, "/v1/completions", pair)
    assert (status, doc["choices"][0]["text"]) == (200, "\U0001f600 ")
    assert client.completions.create(model="echo_llm", prompt="ok", max_tokens=1).choices


def test_an_assistants_refusal_part_goes_back_into_the_conversation(
    client: openai.OpenAI,
) -> None:
    """OpenAI's API takes an assistant's content as text and refusal parts (the `openai`
    client's ChatCompletionContentPartRefusalParam): a conversation that carries a refusal
    back is rendered with its words, as vLLM's server renders it."""
    messages: Any = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "cannot"}]},
        {"role": "user", "content": [{"type": "text", "text": "why"}]},
    ]
    answer = client.chat.completions.create(model="echo_llm", messages=messages, max_tokens=7)
    assert answer.choices[0].message.content == "user: hi assistant: cannot user: why assistant: "
    # Only an assistant refuses: a user's refusal part is still refused.
    messages[2]["content"] = [{"type": "refusal", "refusal": "no"}]
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="echo_llm", messages=messages, max_tokens=1)
    assert refused.value.param == "messages[2].content"


def test_a_route_the_server_lacks_is_refused_in_openais_shape(client: openai.OpenAI) -> None:
    """Under `/v1` every refusal is OpenAI's document, aiohttp's own 404 and 405 too: the
    client's `responses` API (not served here) reads which routes are."""
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model="echo_llm", input="hi")
    assert isinstance(missing.value.body, dict), missing.value.body
    assert missing.value.body["type"] == "invalid_request_error"
    assert "Invalid URL (POST /v1/responses)" in missing.value.message
    assert "/v1/chat/completions" in missing.value.message
    with pytest.raises(openai.APIStatusError) as wrong_method:
        client.get("/chat/completions", cast_to=object)
    assert wrong_method.value.status_code == 405
    assert isinstance(wrong_method.value.body, dict), wrong_method.value.body


def test_a_model_error_mid_stream_is_an_error_event_then_done(server: ServeProcess) -> None:
    body = json.dumps(
        {"model": "echo_llm", "prompt": "FAIL now", "max_tokens": 4, "stream": True}
    ).encode()
    request = urllib.request.Request(server.url + "/v1/completions", data=body)
    with urllib.request.urlopen(request, timeout=30) as resp:
        events = [line for line in resp.read().decode().split("\n\n") if line]
    assert json.loads(events[0].removeprefix("data: "))["choices"][0]["text"] == "FAIL "
    error = json.loads(events[1].removeprefix("data: "))["error"]
    assert "failed on purpose" in error["message"]
    assert events[-1] == "data: [DONE]"


def test_a_models_exception_reads_without_the_servers_directories(server: ServeProcess) -> None:
    # Its "At:" lines name the model file: the repository's directory is cut from them, as
    # from every error body (thawserver.redaction), before the first token and mid-stream.
    body = {"model": "echo_llm", "prompt": "RAISE now", "max_tokens": 4}
    status, answer = _post(server, "/v1/completions", json.dumps(body).encode())
    assert status == 500
    message = answer["error"]["message"]
    assert "raised on purpose (RAISE)" in message and "echo_llm/1/model.py" in message
    assert str(server.repo) not in message
    request = urllib.request.Request(
        server.url + "/v1/completions", data=json.dumps({**body, "stream": True}).encode()
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        events = [line for line in resp.read().decode().split("\n\n") if line]
    message = json.loads(events[1].removeprefix("data: "))["error"]["message"]
    assert "raised on purpose (RAISE)" in message and "echo_llm/1/model.py" in message
    assert str(server.repo) not in message
    assert events[-1] == "data: [DONE]"
