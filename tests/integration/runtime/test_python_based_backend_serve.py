"""`thaw serve --backend-directory DIR`: a model whose config says `backend: "echo_py"` runs
DIR/echo_py/model.py, as Triton runs a Python-based backend (vllm_backend's layout): the
backend's own modules beside model.py import, `auto_complete_config` completes the config, and
`pb_utils.get_model_dir()` is the model's version folder, where its own files are."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.python_based import infer_echo, make_echo_backend, make_echo_model
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration


def test_two_models_share_a_python_based_backend(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    backends = make_echo_backend(tmp_path)
    repo = tmp_path / "models"
    make_echo_model(repo, "hello", "hello")
    make_echo_model(repo, "bye", "bye")
    server = start_serve(repo, f"--backend-directory={backends}")
    assert infer_echo(server.url, "hello", "world") == "hello world!"
    assert infer_echo(server.url, "bye", "world") == "bye world!"
    with urllib.request.urlopen(f"{server.url}/v2/models/hello/config", timeout=10) as reply:
        config = json.loads(reply.read())
    assert [i["name"] for i in config["input"]] == ["IN"]  # auto_complete_config ran
