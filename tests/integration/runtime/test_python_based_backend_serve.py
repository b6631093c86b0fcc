"""`thaw serve --backend-directory DIR`: a model whose config says `backend: "echo_py"` runs
DIR/echo_py/model.py, as Triton runs a Python-based backend (vllm_backend's layout): the
backend's own modules beside model.py import, `auto_complete_config` completes the config, and
`pb_utils.get_model_dir()` is the model's version folder, where its own files are."""

from __future__ import annotations

import json
import textwrap
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

ECHO_MODEL = """
import os
import numpy as np
import triton_python_backend_utils as pb_utils
from echo_helpers import suffix  # the backend's own module, beside model.py

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "IN", "data_type": "TYPE_STRING", "dims": [1]})
        config.add_output({"name": "OUT", "data_type": "TYPE_STRING", "dims": [1]})
        return config

    def initialize(self, args):
        with open(os.path.join(pb_utils.get_model_dir(), "greeting.txt")) as f:
            self.greeting = f.read().strip()

    def execute(self, requests):
        answers = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0].decode()
            out = np.array([(self.greeting + " " + text + suffix()).encode()], dtype=np.object_)
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return answers
"""


def _model(repo: Path, name: str, greeting: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text('backend: "echo_py"\n')
    (repo / name / "1" / "greeting.txt").write_text(greeting)


def _infer(url: str, model: str, text: str) -> str:
    body = {"inputs": [{"name": "IN", "shape": [1], "datatype": "BYTES", "data": [text]}]}
    request = urllib.request.Request(
        f"{url}/v2/models/{model}/infer", json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(json.loads(response.read())["outputs"][0]["data"][0])


def test_two_models_share_a_python_based_backend(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    backend = tmp_path / "backends" / "echo_py"
    backend.mkdir(parents=True)
    (backend / "model.py").write_text(textwrap.dedent(ECHO_MODEL))
    (backend / "echo_helpers.py").write_text("def suffix():\n    return '!'\n")
    repo = tmp_path / "models"
    _model(repo, "hello", "hello")
    _model(repo, "bye", "bye")
    server = start_serve(repo, f"--backend-directory={tmp_path / 'backends'}")
    assert _infer(server.url, "hello", "world") == "hello world!"
    assert _infer(server.url, "bye", "world") == "bye world!"
    with urllib.request.urlopen(f"{server.url}/v2/models/hello/config", timeout=10) as reply:
        config = json.loads(reply.read())
    assert [i["name"] for i in config["input"]] == ["IN"]  # auto_complete_config ran
