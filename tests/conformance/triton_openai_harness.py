"""The harness Triton's OpenAI-frontend tests run in here: copied as their `conftest.py`.

Triton's own conftest and `tests/utils.py` start Triton (its frontend process, or an in-process
`tritonserver`); this one gives the same fixtures over a real `thaw serve` on a free port:

    server          .get_client() / .get_async_client(): `openai` clients on `/v1`
    fastapi_client_class_scope   an HTTP client on the same server (Triton's is FastAPI's
                    TestClient, an `httpx.Client` around an in-process Triton; here the
                    `openai` client's own httpx, `httpx2`: the same .get / .post(json=...) /
                    .status_code / .json())
    backend         "vllm" (what Triton's tests branch on: one model in the repository)
    model           tiny_gpt (tests/fixtures/openai_models.py `tiny_gpt_vllm`: a causal LM,
                    random weights, byte tokens, CPU, with vLLM's backend's inputs and outputs,
                    logprobs included)
    model_repository, prompt, messages, input, tokenizer_model   as Triton's conftest

and answers their `from tests.utils import ...` with tests/conformance/triton_openai_server.py.

Not a test module of this project: tests/conformance/triton_openai.py writes it next to
Triton's unchanged test files in a temporary directory.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import openai
import pytest

from tests.conformance import triton_openai_server
from tests.fixtures.openai_models import make_tiny_gpt_vllm
from tests.fixtures.serve_process import ServeProcess

# Triton's tests import `tests.utils` (their package's); `tests` here is Thaw's, so its stand-in
# (tests/conformance/triton_openai_server.py) answers to that name.
sys.modules["tests.utils"] = triton_openai_server

MODEL = "tiny_gpt"


class ThawOpenAIServer:
    """What Triton's tests call on their `server` fixture."""

    def __init__(self, serve: ServeProcess) -> None:
        self._serve = serve

    @property
    def url(self) -> str:
        return self._serve.url

    def get_client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self._serve.url + "/v1", api_key="EMPTY", max_retries=0)

    def get_async_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self._serve.url + "/v1", api_key="EMPTY", max_retries=0)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "openai: runs against an OpenAI server (thaw serve)")
    config.addinivalue_line("markers", "fastapi: Triton's in-process FastAPI app")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the tests the runner deselected (exact node ids: a test with all its parameters,
    one parametrized case, or a whole class)."""
    names = set(os.environ.get("THAW_TRITON_OPENAI_DESELECT", "").split("\n")) - {""}

    def deselected(item: pytest.Item) -> bool:
        test = item.nodeid.split("[")[0]
        return item.nodeid in names or test in names or test.rpartition("::")[0] in names

    kept = [item for item in items if not deselected(item)]
    dropped = [item for item in items if deselected(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def backend() -> str:
    return "vllm"


@pytest.fixture(scope="session")
def model() -> str:
    return MODEL


@pytest.fixture(scope="session")
def model_repository(tmp_path_factory: pytest.TempPathFactory) -> str:
    repo = tmp_path_factory.mktemp("thaw_openai")
    make_tiny_gpt_vllm(repo, MODEL)
    return str(repo)


@pytest.fixture(scope="session")
def tokenizer_model() -> str:
    return ""  # the model's own files (none: the documented fallback chat prompt)


@pytest.fixture(scope="session")
def prompt() -> str:
    return "What is machine learning?"


@pytest.fixture(scope="session")
def messages(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


@pytest.fixture(scope="session")
def input(prompt: str) -> str:
    return prompt


@pytest.fixture(scope="module")
def server(model_repository: str) -> Iterator[ThawOpenAIServer]:
    serve = ServeProcess(Path(model_repository))
    try:
        serve.wait_ready()
        yield ThawOpenAIServer(serve)
    finally:
        serve.stop()


@pytest.fixture(scope="class")
def fastapi_client_class_scope(server: ThawOpenAIServer) -> Iterator[httpx2.Client]:
    with httpx2.Client(base_url=server.url, timeout=120) as client:
        yield client
