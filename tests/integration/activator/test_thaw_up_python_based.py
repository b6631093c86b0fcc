"""`thaw up --backend-directory DIR`: a model whose config names a Python-based backend
(`backend: "echo_py"`, DIR/echo_py/model.py, as Triton runs vllm_backend) is scanned as a
Python model, starts at zero and is woken by its first request on a replica given the same
directory; its config is completed by the backend's own `auto_complete_config`. Refused with
the Kubernetes scaler and for a directory that is not one."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.python_based import infer_echo, make_echo_backend, make_echo_model
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    root = tmp_path_factory.mktemp("python_based")
    backends = make_echo_backend(root)
    repo = root / "models"
    make_echo_model(repo, "hello", "hello")
    server = UpProcess(
        repo,
        "--warm-pool", "1",
        "--preload-frameworks", "",
        "--no-image-build",
        "--cache", str(root / "cache"),
        "--backend-directory", str(backends),
    )  # fmt: skip
    yield server
    server.stop()


def test_a_python_based_backend_model_wakes_from_zero_and_serves(up: UpProcess) -> None:
    assert up.model("hello")["replicas_ready"] == 0  # scanned as a model, at zero
    assert infer_echo(up.url, "hello", "world") == "hello world!"
    with urllib.request.urlopen(f"{up.url}/v2/models/hello/config", timeout=30) as reply:
        config = json.loads(reply.read())
    assert [i["name"] for i in config["input"]] == ["IN"]  # the backend's auto_complete_config


@pytest.mark.parametrize(
    ("extra", "refusal"),
    [
        (["--scaler", "kubernetes"], "not supported with --scaler kubernetes"),
        ([], "is not a directory"),
    ],
)
def test_a_backend_directory_thaw_up_cannot_use_refuses_the_start(
    tmp_path: Path, extra: list[str], refusal: str
) -> None:
    repo = tmp_path / "models"
    make_echo_model(repo, "hello", "hello")
    missing = tmp_path / "no_such_dir"
    proc = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0",
         "--backend-directory", str(missing), *extra],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2  # a configuration error, before anything starts
    assert refusal in proc.stderr, proc.stderr
