"""Triton's OpenAI frontend's model control on a real `thaw serve`: `/health/ready`, the model
list of explicit mode (only what is loaded), the load/unload routes and their refusals in its
words, and the `--load-model` refusals that stop the start."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import openai_models
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("control_repo")
    openai_models.make_echo_llm(repo)
    openai_models.make_echo_llm(repo, "other_llm")
    return repo


@pytest.fixture(scope="module")
def explicit(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    # A second repository with a model whose config does not parse (only ever loaded on call).
    broken = tmp_path_factory.mktemp("broken_repo")
    (broken / "broken_config").mkdir()
    (broken / "broken_config" / "config.pbtxt").write_text("this is { not a config")
    serve = ServeProcess(
        repo, f"--model-repository={broken}", "--model-control-mode", "explicit",
        "--load-model", "other_llm",
    )  # fmt: skip
    serve.wait_ready()
    yield serve
    serve.stop()


def _call(server: ServeProcess, method: str, path: str) -> tuple[int, Any]:
    request = urllib.request.Request(
        server.url + path, method=method, data=b"" if method == "POST" else None
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            body = resp.read()
            return resp.status, json.loads(body) if body else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _listed(server: ServeProcess) -> list[str]:
    status, doc = _call(server, "GET", "/v1/models")
    assert status == 200
    return [m["id"] for m in doc["data"]]


def test_health_ready_answers_on_the_openai_port(explicit: ServeProcess) -> None:
    assert _call(explicit, "GET", "/health/ready")[0] == 200


def test_explicit_mode_lists_only_the_loaded_models(explicit: ServeProcess) -> None:
    assert _listed(explicit) == ["other_llm"]
    assert _call(explicit, "GET", "/v1/models/echo_llm")[0] == 404


def test_load_then_unload_in_tritons_words(explicit: ServeProcess) -> None:
    status, doc = _call(explicit, "POST", "/v1/models/echo_llm/load")
    assert (status, doc["id"], doc["owned_by"]) == (200, "echo_llm", "Triton Inference Server")
    assert "echo_llm" in _listed(explicit)
    status, doc = _call(explicit, "POST", "/v1/models/echo_llm/load")
    assert (status, doc) == (400, {"detail": "Model 'echo_llm' is already loaded"})

    status, doc = _call(explicit, "POST", "/v1/models/echo_llm/unload")
    assert (status, doc) == (200, {"status": "success", "model": "echo_llm"})
    assert _listed(explicit) == ["other_llm"]
    status, doc = _call(explicit, "POST", "/v1/models/echo_llm/unload")
    assert (status, doc) == (400, {"detail": "Unknown model: echo_llm"})


def test_a_load_of_a_model_not_in_the_repository_fails(explicit: ServeProcess) -> None:
    status, doc = _call(explicit, "POST", "/v1/models/no_such_model/load")
    assert status == 500
    assert "failed to poll from model repository" in doc["detail"]


def test_a_load_of_a_wrong_config_is_the_clients_error(explicit: ServeProcess) -> None:
    status, doc = _call(explicit, "POST", "/v1/models/broken_config/load")
    assert status == 400
    assert doc["detail"].startswith("Failed to load model 'broken_config': ")
    assert "broken_config/config.pbtxt" in doc["detail"]
    assert "broken_repo" not in doc["detail"]  # the repository's directory is cut from it
    assert "broken_config" not in _listed(explicit)


def test_concurrent_loads_one_succeeds_the_rest_are_refused(explicit: ServeProcess) -> None:
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        codes = sorted(
            pool.map(lambda _: _call(explicit, "POST", "/v1/models/echo_llm/load")[0], range(4))
        )
    assert codes == [200, 400, 400, 400]
    assert _call(explicit, "POST", "/v1/models/echo_llm/unload")[0] == 200


def test_load_and_unload_are_refused_outside_explicit_mode(repo: Path) -> None:
    serve = ServeProcess(repo)
    try:
        serve.wait_ready()
        for action in ("load", "unload"):
            status, doc = _call(serve, "POST", f"/v1/models/echo_llm/{action}")
            assert (status, doc) == (
                400, {"detail": "Model load/unload requires --model-control-mode=explicit"}
            )  # fmt: skip
        assert _listed(serve) == ["echo_llm", "other_llm"]
    finally:
        serve.stop()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["--load-model", "echo_llm"],
            "Error: Use of '--load-model' requires setting '--model-control-mode=explicit' "
            "as well.",
        ),
        (
            ["--model-control-mode", "explicit", "--load-model", "*", "--load-model", "echo_llm"],
            "Wildcard model name '*' must be the ONLY startup model if specified at all.",
        ),
        (
            ["--model-control-mode", "explicit", "--load-model", "nope"],
            "failed to poll model 'nope': model not found in any model repository",
        ),
    ],
)
def test_a_refused_startup_model_stops_the_start(repo: Path, args: list[str], words: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "serve", str(repo), "--port", "0", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert words in proc.stderr


@pytest.mark.parametrize("name", ["..%2F..%2Fetc", "%2Fetc", "a" * 600, "%00nul", "bad%20name"])
@pytest.mark.parametrize("action", ["load", "unload"])
def test_hostile_model_names_are_refused_and_the_server_keeps_serving(
    explicit: ServeProcess, repo: Path, name: str, action: str
) -> None:
    """A name that is no model name (a path, a NUL, 600 characters) never reaches the disk:
    a client error (`{"detail": ...}`), nothing written outside the repository, and the
    server goes on answering."""
    before = sorted(p.name for p in repo.parent.iterdir())
    status, doc = _call(explicit, "POST", f"/v1/models/{name}/{action}")
    assert status == 400, (status, doc)
    words = "invalid model name" if action == "load" else "Unknown model"
    assert words in doc["detail"], doc
    assert sorted(p.name for p in repo.parent.iterdir()) == before
    assert "other_llm" in _listed(explicit)  # still serving
