"""Fuzz the OpenAI routes of a real `thaw serve` over loopback HTTP: hostile bodies and headers.

One server for the module (tests.fixtures: `echo_llm`, a TRT-LLM-style Python model; the same
with a chat template that renders tools and earlier calls; `embed_text`; `--tool-call-parser
mistral`). Each example POSTs one body (tests.fuzz.openai_bodies: a request document with
fields right, wrong or missing, or bytes that are no such document) to one `/v1` route, with
hostile headers at times. Property: the answer is 200 for a valid body (a JSON answer, or
Server-Sent Events ending in `[DONE]`) or a 4xx whose body is OpenAI's error document; never
a 5xx, never a hang (each example has the harness's deadline, each request a timeout), no
"unexpected error" in the server's log; and the server answers a normal request afterwards.

Budget: the harness's (150 examples in CI, 5,000 in the `slow` run), two loopback round trips
each: about a second in CI, a second or two more for the server's start; each example's
deadline is five times the harness's (a real server on a loaded two-core machine).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import strategies as st

from tests.fixtures import openai_models
from tests.fixtures.serve_process import ServeProcess
from tests.fuzz.openai_bodies import (
    MODEL,
    TEMPLATED_MODEL,
    body_bytes,
    chat_bodies,
    completion_bodies,
    embedding_bodies,
)
from tests.fuzz.targets import DEADLINE_MS, fuzz_target
from thawwire.openai_api import MAX_TOKENS_LIMIT

pytestmark = pytest.mark.integration

MAX_BODY_BYTES = 65536
TIMEOUT_S = 30.0
TEMPLATE = (
    "{{ bos_token }}{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}"
    "<{{ m.role }}>{{ m.content }}{% for c in m.tool_calls or [] %}"
    "{{ c.function.name }}{{ c.function.arguments | tojson }}"
    "{% for k, v in c.function.arguments.items() %}{{ k }}={{ v }};{% endfor %}{% endfor %}"
    "</{{ m.role }}>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)
ERROR_KEYS = {"message", "type", "param", "code"}

MAX_GENERATED = 64


def _small(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` asking for at most MAX_GENERATED tokens where it asked for more that the server
    allows (echo_llm would stream them all: a slow example, not a finding); a count past the
    server's limit is left for it to refuse."""
    for key in ("max_tokens", "max_completion_tokens"):
        value = doc.get(key)
        if type(value) is int and MAX_GENERATED < value <= MAX_TOKENS_LIMIT:
            doc[key] = MAX_GENERATED
    return doc


_ROUTES = {
    "/v1/chat/completions": chat_bodies().map(_small),
    "/v1/completions": completion_bodies().map(_small),
    "/v1/embeddings": embedding_bodies(),
}
_CONTENT_TYPES = st.sampled_from(
    [None, "application/json", "application/json", "application/json", "text/plain",
     "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
     "application/json; charset=latin-1"]
)  # fmt: skip
_ENCODINGS = st.sampled_from([None] * 12 + ["identity", "gzip", "br", "x"])


# Names whose request line stays under aiohttp's 8,190 bytes: a longer line is refused by its
# parser before any route is known, as `{"error": ...}` (thawserver.aiohttp_compat), not in
# OpenAI's document, even under /v1.
_MODEL_NAMES = st.sampled_from(
    [MODEL, "no_such_model", "..", "a/b", "x" * 2000, "%00", "\x00", "\ud7ff", "e\u0301"]
) | st.text(max_size=64)


@st.composite
def _requests(draw: st.DrawFn) -> tuple[str, str, bytes, dict[str, str]]:
    """(method, path, body, headers): a route's body, or a body meant for another route; or
    a model looked up by any name."""
    if draw(st.integers(0, 9)) == 9:
        return "GET", "/v1/models/" + quote(draw(_MODEL_NAMES), safe=""), b"", {}
    path = draw(st.sampled_from(list(_ROUTES)))
    if draw(st.integers(0, 9)) == 9:  # a route that takes no POST, or none at all
        path = draw(st.sampled_from(["/v1/models", "/v1/nope", "/v1/models/echo_llm"]))
    documents = _ROUTES.get(path) if draw(st.integers(0, 4)) < 4 else None
    body = draw(body_bytes(st.one_of(*_ROUTES.values()) if documents is None else documents))
    headers = {}
    content_type, encoding = draw(_CONTENT_TYPES), draw(_ENCODINGS)
    if content_type is not None:
        headers["Content-Type"] = content_type
    if encoding is not None:
        headers["Content-Encoding"] = encoding
    return "POST", path, body, headers


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("openai_fuzz_repo")
    openai_models.make_echo_llm(repo, MODEL)
    openai_models.make_echo_llm(repo, TEMPLATED_MODEL, chat_template=TEMPLATE)
    openai_models.make_embed_text(repo)
    serve = ServeProcess(
        repo,
        "--max-body-bytes", str(MAX_BODY_BYTES),
        "--default-max-tokens", "4",
        "--tool-call-parser", "mistral",
    )  # fmt: skip
    serve.wait_ready()
    yield serve
    serve.stop()


def _send(
    server: ServeProcess, method: str, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, str | None, bytes]:
    """(status, content type, body) of one request on a connection of its own."""
    host, port = server.hostport.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type"), response.read()
    finally:
        connection.close()


def _check_answer(status: int, content_type: str | None, raw: bytes) -> None:
    assert status < 500, (status, raw[:300])
    if status >= 400:
        doc = json.loads(raw)
        assert set(doc) == {"error"} and set(doc["error"]) == ERROR_KEYS, doc
        assert isinstance(doc["error"]["message"], str) and doc["error"]["message"]
        return
    assert status == 200, status
    if content_type is not None and content_type.startswith("text/event-stream"):
        events = [e for e in raw.decode().split("\n\n") if e]
        assert events[-1] == "data: [DONE]", events[-3:]
        for event in events[:-1]:
            doc = json.loads(event.removeprefix("data: "))
            assert "error" not in doc, doc  # a valid body's stream has no error in it
        return
    doc = json.loads(raw)
    assert doc.get("choices") or doc.get("data") or doc.get("object") == "model", doc


def _still_serving(server: ServeProcess) -> None:
    body = json.dumps({"model": MODEL, "prompt": "ok", "max_tokens": 1}).encode()
    headers = {"Content-Type": "application/json"}
    status, _, raw = _send(server, "POST", "/v1/completions", body, headers)
    assert status == 200 and json.loads(raw)["choices"][0]["text"] == "ok ", (status, raw)


@fuzz_target(
    _requests(),
    deadline_ms=DEADLINE_MS * 5,  # two round trips and a generation, on a loaded machine
)
def _routes(server: ServeProcess, request: tuple[str, str, bytes, dict[str, str]]) -> None:
    _check_answer(*_send(server, *request))
    _still_serving(server)


test_openai_routes_answer_in_openais_shape, test_openai_routes_answer_in_openais_shape_long = (
    _routes
)


def test_the_server_logged_no_unexpected_error(server: ServeProcess) -> None:
    """After the examples above (this module's tests run in order): nothing reached the
    error middleware's catch-all, which logs "unexpected error" and answers a bare 500."""
    _still_serving(server)
    assert "unexpected error" not in server.logs(), server.logs()[-3000:]
