"""A Python model's `auto_complete_config` runs in a process of its own (as in Triton's stub):
a model file that exits while it is imported costs its own load a clear 400, not the server;
one that hangs there holds only its own load, while other models load and serve. A model whose
hook completes its config still has it completed."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.fixtures.models import python_model
from tests.fixtures.python_env import python_env
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

_IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
"""
_CONFIG = """
name: "{name}"
backend: "python"
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }} ]
"""
# The hook's name in each file is what sends its import to the child process.
_EXITS = "import os\nos._exit(3)  # before auto_complete_config is ever reached\n" + _IDENTITY
_HANGS = "import time\ntime.sleep(3600)  # never reaches auto_complete_config\n" + _IDENTITY
_COMPLETES = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [1]})
        config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [1]})
        config.set_max_batch_size(4)
        return config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
"""


def _post(url: str, body: bytes = b"") -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else {}
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServeProcess]:
    repo = tmp_path / "repo"
    python_model(repo, "plain", _CONFIG.format(name="plain"), _IDENTITY)
    python_model(repo, "exits", _CONFIG.format(name="exits"), _EXITS)
    python_model(repo, "hangs", _CONFIG.format(name="hangs"), _HANGS)
    python_model(repo, "completes", 'name: "completes"\nbackend: "python"\n', _COMPLETES)
    serve = ServeProcess(repo, "--model-control-mode", "explicit")
    serve.wait_ready()
    yield serve
    serve.stop()


def _infer(server: ServeProcess, model: str, shape: tuple[int, ...] = (1,)) -> int:
    body = {"inputs": [{"name": "X", "shape": list(shape), "datatype": "FP32", "data": [7]}]}
    status, _ = _post(f"{server.url}/v2/models/{model}/infer", json.dumps(body).encode())
    return status


def test_a_model_file_that_exits_on_import_fails_its_load_not_the_server(
    server: ServeProcess,
) -> None:
    status, body = _post(f"{server.url}/v2/repository/models/exits/load")
    assert status == 400
    assert "exit status 3" in str(body["error"]), body
    assert server.proc.poll() is None  # the server lives
    assert _post(f"{server.url}/v2/repository/models/plain/load")[0] == 200
    assert _infer(server, "plain") == 200


def test_a_model_file_that_hangs_on_import_holds_only_its_own_load(
    server: ServeProcess,
) -> None:
    hung: list[int] = []

    def load_hung() -> None:
        with contextlib.suppress(OSError):  # the server stops under it at the end
            hung.append(_post(f"{server.url}/v2/repository/models/hangs/load")[0])

    loading = threading.Thread(target=load_hung, daemon=True)
    loading.start()
    importing = _wait_for_importers(server, at_least=1)
    status, body = _post(f"{server.url}/v2/repository/models/completes/load")
    assert status == 200, body
    assert _infer(server, "completes", (1, 1)) == 200  # its hook made it batch
    assert hung == []  # still importing: it held nobody else's load
    server.stop()
    for child in importing:  # the hung import does not outlive the server
        child.wait(timeout=10)


def _wait_for_importers(server: ServeProcess, *, at_least: int) -> list[psutil.Process]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = [
            p
            for p in psutil.Process(server.proc.pid).children(recursive=True)
            if "runtime.python.stub.auto_complete_main" in " ".join(p.cmdline())
        ]
        if len(found) >= at_least:
            return found
        time.sleep(0.05)
    raise AssertionError("no auto_complete_config process started")


def test_a_hook_in_its_own_process_still_completes_the_config(server: ServeProcess) -> None:
    assert _post(f"{server.url}/v2/repository/models/completes/load")[0] == 200
    with urllib.request.urlopen(f"{server.url}/v2/models/completes/config", timeout=60) as r:
        config = json.loads(r.read())
    assert config["max_batch_size"] == 4
    assert [i["name"] for i in config["input"]] == ["X"]


# Importable only under the model's EXECUTION_ENV_PATH environment, never the server's.
_ENV_ONLY = {"thaw_env_only_sizes": "MAX_BATCH_SIZE = 6\n"}
_COMPLETES_IN_ENV = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        import thaw_env_only_sizes

        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [1]})
        config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [1]})
        config.set_max_batch_size(thaw_env_only_sizes.MAX_BATCH_SIZE)
        return config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
"""
_IN_ENV = """name: "{name}"
backend: "python"
parameters {{
  key: "EXECUTION_ENV_PATH" value {{ string_value: "$$TRITON_MODEL_DIRECTORY/{env}" }}
}}
"""


def test_the_hook_runs_in_the_models_own_environment(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    python_model(repo, "plain", _CONFIG.format(name="plain"), _IDENTITY)
    python_model(repo, "in_env", _IN_ENV.format(name="in_env", env="pyenv"), _COMPLETES_IN_ENV)
    python_env(repo / "in_env" / "pyenv", _ENV_ONLY)
    python_model(repo, "no_env", _IN_ENV.format(name="no_env", env="gone"), _COMPLETES_IN_ENV)
    serve = ServeProcess(repo, "--model-control-mode", "explicit")
    try:
        serve.wait_ready()
        status, body = _post(f"{serve.url}/v2/repository/models/in_env/load")
        assert status == 200, body
        with urllib.request.urlopen(f"{serve.url}/v2/models/in_env/config", timeout=60) as r:
            config = json.loads(r.read())
        assert config["max_batch_size"] == 6  # the environment's module said so
        assert _infer(serve, "in_env", (1, 1)) == 200
        status, body = _post(f"{serve.url}/v2/repository/models/no_env/load")
        assert status == 400
        error = str(body["error"])  # the server shortens a long one in its middle
        assert "model 'no_env': auto_complete_config: EXECUTION_ENV_PATH" in error, body
        assert "no_env/gone holds no bin/python" in error, body
        assert _post(f"{serve.url}/v2/repository/models/plain/load")[0] == 200
        assert _infer(serve, "plain") == 200  # the server serves on
    finally:
        serve.stop()
