"""The harness Triton's OpenAI-frontend tests run in here: copied as their `conftest.py`.

Triton's own conftest and `tests/utils.py` start Triton (its frontend process, or an in-process
`tritonserver`); this one gives the same fixtures over a real `thaw serve` on a free port:

    server          .get_client() / .get_async_client(): `openai` clients on `/v1`
    backend         "vllm" (what Triton's tests branch on: one model in the repository)
    model           tiny_gpt (benchmarks/tiny_gpt.py: a causal LM, random weights, CPU)
    model_repository, prompt, messages, input, tokenizer_model   as Triton's conftest

Not a test module of this project: tests/conformance/triton_openai.py writes it next to
Triton's unchanged test files in a temporary directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from benchmarks.openai_ttft import MODEL, build_repo
from tests.fixtures.serve_process import ServeProcess


class ThawOpenAIServer:
    """What Triton's tests call on their `server` fixture."""

    def __init__(self, serve: ServeProcess) -> None:
        self._serve = serve

    def get_client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self._serve.url + "/v1", api_key="EMPTY", max_retries=0)

    def get_async_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self._serve.url + "/v1", api_key="EMPTY", max_retries=0)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "openai: runs against an OpenAI server (thaw serve)")
    config.addinivalue_line("markers", "fastapi: Triton's in-process FastAPI app")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the tests the runner deselected (exact node ids, parameters aside)."""
    names = set(os.environ.get("THAW_TRITON_OPENAI_DESELECT", "").split("\n")) - {""}
    kept = [item for item in items if item.nodeid.split("[")[0] not in names]
    dropped = [item for item in items if item.nodeid.split("[")[0] in names]
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
    work = tmp_path_factory.mktemp("thaw_openai")
    return str(build_repo(work, layers=2, width=64, threads=1))


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
