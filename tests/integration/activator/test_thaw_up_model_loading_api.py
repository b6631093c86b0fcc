"""A Python model's model loading API (`pb_utils.load_model`, `unload_model`,
`is_model_ready`) through a real `thaw up`, in a stub process (the default) and in the
replica's process: as Triton's server does, the platform loads the model for every client.
Before, the load ran inside the calling model's replica, which alone could see the model: a
client was told it was not loaded, and every other replica loaded its own copy."""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.model_loader import loader_answer, loader_request, make_model_loader
from tests.fixtures.models import ECHO_EXECUTE, SCALED_PY, python_model
from tests.fixtures.up_process import UpProcess, light_args, with_params
from thawwire.model_control import CONTROL_DISABLED, not_in_repository

pytestmark = pytest.mark.integration

_ECHO_CONFIG = (
    'name: "{name}"\nbackend: "python"\n'
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
)
_ECHO_PY = "import triton_python_backend_utils as pb_utils\n\n\nclass TritonPythonModel:" + (
    ECHO_EXECUTE
)
_INPUT = [1.0, 2.0, 3.0, 4.0]
LOADERS = ["loader", "loader_in_process"]
# Far above what a test takes: a model-control call that waited for it would fail with a 502.
_DRAIN_TIMEOUT_S = 60
# The client cap (a load's floor is 1 MiB): a model's load carries the deployment's token, so
# its files pass up to the internal cap where a client's same load is refused.
_CLIENT_CAP = 1 << 20


def _scaled_config(name: str, scale: int) -> str:
    return json.dumps(
        {
            "name": name,
            "backend": "python",
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
            "parameters": {"scale": {"string_value": str(scale)}},
        }
    )


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("model_loading_api") / "repo"
    repo.mkdir()
    make_model_loader(repo, "loader")
    with_params(make_model_loader(repo, "loader_in_process"), python_runtime="in_process")
    for name in ("echo_a", "echo_b"):
        python_model(repo, name, _ECHO_CONFIG.replace("{name}", name), _ECHO_PY)
    python_model(repo, "scaled", _scaled_config("scaled", 1), SCALED_PY)
    return repo


@pytest.fixture(scope="module")
def up(repo: Path) -> Iterator[UpProcess]:
    server = UpProcess(
        repo,
        *light_args(repo),
        "--model-control-mode=explicit",
        "--load-model=loader",
        "--load-model=loader_in_process",
        f"--drain-timeout-s={_DRAIN_TIMEOUT_S}",
        f"--max-body-bytes={_CLIENT_CAP}",
    )
    yield server
    server.stop()


def _request(up: UpProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(up.hostport, timeout=2 * _DRAIN_TIMEOUT_S)
    try:
        conn.request(method, path, json.dumps(body).encode() if body is not None else None)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, json.loads(raw) if raw else None
    finally:
        conn.close()


def _ask(up: UpProcess, loader: str, **call: Any) -> dict[str, Any]:
    """What `loader`'s model loading API answered to `call`."""
    status, answer = _request(up, "POST", f"/v2/models/{loader}/infer", loader_request(**call))
    assert status == 200, answer
    return loader_answer(answer)


def _infer(up: UpProcess, model: str) -> tuple[int, Any]:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": _INPUT}]}
    return _request(up, "POST", f"/v2/models/{model}/infer", body)


def _state(up: UpProcess, model: str) -> str | None:
    status, index = _request(up, "POST", "/v2/repository/index", {})
    assert status == 200, index
    return next((row.get("state") for row in index if row["name"] == model), None)


@pytest.mark.parametrize(("loader", "model"), list(zip(LOADERS, ("echo_a", "echo_b"), strict=True)))
def test_a_model_a_model_loads_is_served_to_clients_and_its_unload_refuses_them(
    up: UpProcess, loader: str, model: str
) -> None:
    assert _ask(up, loader, op="ready", name=model) == {"ready": False}
    assert _request(up, "GET", f"/v2/models/{model}/ready")[0] == 503

    assert _ask(up, loader, op="load", name=model) == {"ready": True}
    assert _request(up, "GET", f"/v2/models/{model}/ready")[0] == 200
    assert _state(up, model) == "READY"
    status, answer = _infer(up, model)
    assert status == 200, answer
    assert answer["outputs"][0]["data"] == _INPUT
    assert _ask(up, loader, op="ready", name=model, version="1") == {"ready": True}
    assert _ask(up, loader, op="ready", name=model, version="2") == {"ready": False}

    assert _ask(up, loader, op="unload", name=model) == {"ready": False}
    assert _request(up, "GET", f"/v2/models/{model}/ready")[0] == 503
    assert _infer(up, model)[0] != 200


@pytest.mark.parametrize("loader", LOADERS)
def test_a_models_load_override_is_what_clients_get(up: UpProcess, loader: str) -> None:
    scale = 3 if loader == "loader" else 5
    config = _scaled_config("scaled", scale)
    assert _ask(up, loader, op="load", name="scaled", config=config) == {"ready": True}
    status, answer = _infer(up, "scaled")
    assert status == 200, answer
    assert answer["outputs"][0]["data"] == [x * scale for x in _INPUT]

    made = f"made_by_{loader}"  # a model with no directory: its files came with the load
    files = {"file:1/model.py": SCALED_PY}
    config = _scaled_config(made, 7)
    assert _ask(up, loader, op="load", name=made, config=config, files=files) == {"ready": True}
    status, answer = _infer(up, made)
    assert status == 200, answer
    assert answer["outputs"][0]["data"] == [x * 7 for x in _INPUT]


@pytest.mark.parametrize("loader", LOADERS)
def test_a_refused_load_reaches_the_model_in_the_platforms_words(
    up: UpProcess, loader: str
) -> None:
    assert _ask(up, loader, op="load", name="nope") == {"error": not_in_repository("nope")}
    answer = _ask(up, loader, op="load", name="echo_a", files={"file:1/model.py": "x = 1\n"})
    assert "failed to load 'echo_a'" in answer["error"]  # files without a config: Triton's refusal
    assert _ask(up, loader, op="ready", name="loader") == {"ready": True}  # it serves on


@pytest.mark.parametrize("loader", LOADERS)
def test_a_model_reloading_itself_answers_without_waiting_for_its_own_drain(
    up: UpProcess, loader: str
) -> None:
    """The load replaces the replica that runs the call, whose stop waits for the call: the
    load must not wait for that stop (it would, the drain timeout long, then the client got
    a 502)."""
    assert _ask(up, loader, op="load", name=loader) == {"ready": True}
    assert _ask(up, loader, op="ready", name=loader) == {"ready": True}  # the new replica


def test_a_models_load_passes_the_client_cap_where_a_clients_same_load_is_refused(
    up: UpProcess,
) -> None:
    files = {"file:1/model.py": SCALED_PY}
    config = _scaled_config("padded", 2)
    call = {"op": "load", "name": "padded", "config": config, "files": files}
    assert _ask(up, "loader", **call, pad=_CLIENT_CAP + 1) == {"ready": True}
    status, answer = _infer(up, "padded")
    assert status == 200, answer
    assert answer["outputs"][0]["data"] == [x * 2 for x in _INPUT]

    files["file:1/padding.txt"] = "x" * (_CLIENT_CAP + 1)
    params = {k: base64.b64encode(v.encode()).decode() for k, v in files.items()}
    body = {"parameters": {"config": _scaled_config("padded_by_client", 2), **params}}
    status, answer = _request(up, "POST", "/v2/repository/models/padded_by_client/load", body)
    assert status == 413, answer
    assert "--max-body-bytes" in answer["error"]


def test_outside_explicit_mode_a_models_load_is_refused_in_tritons_words(
    tmp_path: Path,
) -> None:
    """`thaw up`'s default mode (none): Triton refuses the model loading API; so does the
    platform now (the replica itself, loaded by the activator, is in explicit mode: its own
    server took the load before)."""
    repo = tmp_path / "repo"
    make_model_loader(repo, "loader")
    python_model(repo, "echo_a", _ECHO_CONFIG.replace("{name}", "echo_a"), _ECHO_PY)
    server = UpProcess(repo, *light_args(repo))
    try:
        assert _ask(server, "loader", op="load", name="echo_a") == {"error": CONTROL_DISABLED}
        assert _ask(server, "loader", op="unload", name="echo_a") == {"error": CONTROL_DISABLED}
        assert _ask(server, "loader", op="ready", name="echo_a") == {"ready": True}  # at zero
    finally:
        server.stop()
