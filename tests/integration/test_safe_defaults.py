"""Safe defaults of `thaw up` and `thaw serve` (real processes): the model-control API is off
unless `--model-control-mode explicit` (HTTP and gRPC, Triton's message), both bind loopback
unless told, and no error body shows the repository's directory or a traceback."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import make_add_sub
from tests.fixtures.serve_process import ServeProcess
from tests.fixtures.up_process import UpProcess
from thawwire.model_control import CONTROL_DISABLED

pytestmark = pytest.mark.integration

_INFER = json.dumps(
    {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
).encode()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("safe_defaults_repo")
    make_add_sub(repo)
    (repo / "badcfg" / "1").mkdir(parents=True)
    (repo / "badcfg" / "config.pbtxt").write_text('name: "badcfg"\ninput [ { name: \n')
    (repo / "nofile" / "1").mkdir(parents=True)
    (repo / "nofile" / "config.pbtxt").write_text('name: "nofile"\nbackend: "onnxruntime"\n')
    (repo / "badpy" / "1").mkdir(parents=True)
    (repo / "badpy" / "config.pbtxt").write_text('name: "badpy"\nbackend: "python"\n')
    (repo / "badpy" / "1" / "model.py").write_text("import a_module_that_is_not_there\n")
    return repo


@pytest.fixture(scope="module")
def up(repo: Path) -> Iterator[UpProcess]:
    server = UpProcess(repo, "--warm-pool", "0", "--no-image-build")
    yield server
    server.stop()


def _call(url: str, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url + path, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_thaw_up_refuses_load_and_unload_by_default(up: UpProcess) -> None:
    for action in ("load", "unload"):
        status, body = _call(up.url, "POST", f"/v2/repository/models/add_sub/{action}", b"")
        assert (status, json.loads(body)) == (503, {"error": CONTROL_DISABLED})  # Triton's
    assert up.model("add_sub")["replicas"] == []  # nothing was woken
    client = grpcclient.InferenceServerClient(up.grpc_address)
    try:
        for call in (client.load_model, client.unload_model):
            with pytest.raises(InferenceServerException) as info:
                call("add_sub")
            assert CONTROL_DISABLED in info.value.message()
            assert info.value.status() == "StatusCode.UNAVAILABLE"  # Triton's code
    finally:
        client.close()


def test_both_servers_bind_loopback_by_default(up: UpProcess, repo: Path) -> None:
    assert up.url.startswith("http://127.0.0.1:")
    assert up.grpc_address.startswith("127.0.0.1:")
    serve = ServeProcess(repo)
    try:
        assert serve.wait_listening().startswith("http://127.0.0.1:")
        assert serve.grpc_address.startswith("127.0.0.1:")
    finally:
        serve.stop()


_BROKEN_CALLS = [
    ("GET", "/v2/models/badcfg", None),
    ("POST", "/v2/models/badcfg/infer", _INFER),
    ("POST", "/v2/models/nofile/infer", _INFER),
    ("POST", "/v2/models/badpy/infer", _INFER),
    ("POST", "/v2/repository/models/badcfg/load", b""),
    ("POST", "/v2/repository/models/nofile/load", b""),
    ("POST", "/v2/repository/models/badpy/load", b""),
]


def _assert_clean(repo: Path, url: str) -> None:
    roots = {str(repo), str(repo.resolve()), str(repo.parent)}
    for method, path, body in _BROKEN_CALLS:
        status, answer = _call(url, method, path, body)
        assert status >= 400, (path, answer)
        text = json.loads(answer)["error"]
        assert not any(root in text for root in roots), (path, text)
        assert "Traceback" not in text, (path, text)
        if path == "/v2/repository/models/badcfg/load":
            assert "badcfg/config.pbtxt:3" in text  # still says which file and where


def test_thaw_serve_error_bodies_show_no_directory_or_traceback(repo: Path) -> None:
    serve = ServeProcess(repo, "--model-control-mode", "explicit")
    try:
        serve.wait_ready()
        _assert_clean(repo, serve.url)
        # A failed load's reason in the repository index (a 200 answer) is redacted too.
        status, answer = _call(serve.url, "POST", "/v2/repository/index", b"{}")
    finally:
        serve.stop()
    reasons = {row["name"]: row.get("reason", "") for row in json.loads(answer)}
    assert status == 200 and "badcfg/config.pbtxt:3" in reasons["badcfg"], reasons
    roots = {str(repo), str(repo.resolve()), str(repo.parent)}
    assert not any(root in reason for reason in reasons.values() for root in roots), reasons


def test_thaw_up_error_bodies_show_no_directory_or_traceback(repo: Path) -> None:
    up = UpProcess(repo, "--warm-pool", "0", "--no-image-build", "--model-control-mode", "explicit")
    try:
        _assert_clean(repo, up.url)
    finally:
        up.stop()


def _grpc_errors(address: str) -> dict[str, str]:
    """The message of each failing gRPC call about the broken models."""
    client = grpcclient.InferenceServerClient(address)
    x = grpcclient.InferInput("INPUT0", [4], "FP32")
    x.set_data_from_numpy(np.arange(4, dtype=np.float32))
    calls = {
        "metadata badcfg": lambda: client.get_model_metadata("badcfg"),
        "infer nofile": lambda: client.infer("nofile", [x]),
        "infer badpy": lambda: client.infer("badpy", [x]),
        "load badcfg": lambda: client.load_model("badcfg"),
        "load nofile": lambda: client.load_model("nofile"),
        "load badpy": lambda: client.load_model("badpy"),
    }
    messages: dict[str, str] = {}
    try:
        for name, call in calls.items():
            with pytest.raises(InferenceServerException) as info:
                call()
            messages[name] = str(info.value.message())
    finally:
        client.close()
    return messages


def test_thaw_serve_grpc_errors_show_no_directory_or_traceback(repo: Path) -> None:
    serve = ServeProcess(repo, "--model-control-mode", "explicit")
    try:
        serve.wait_ready()
        messages = _grpc_errors(serve.grpc_address)
        client = grpcclient.InferenceServerClient(serve.grpc_address)
        try:
            index = client.get_model_repository_index(as_json=True)["models"]
        finally:
            client.close()
    finally:
        serve.stop()
    messages |= {f"index {row['name']}": row.get("reason", "") for row in index}
    roots = {str(repo), str(repo.resolve()), str(repo.parent)}
    for name, text in messages.items():
        assert not any(root in text for root in roots), (name, text)
        assert "Traceback" not in text, (name, text)
    assert "badcfg/config.pbtxt:3" in messages["load badcfg"]  # still says which file and where
