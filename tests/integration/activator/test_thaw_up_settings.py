"""`thaw up`'s logging and trace extensions (docs/decisions/0021): the same calls and answers
as `thaw serve`, for models at zero too; the log settings govern the activator's own log and
reach every replica, the one woken after the change and the one already warm; no client names
a file."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import make_python_identity
from tests.fixtures.up_process import UpProcess, with_params

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[UpProcess, Path]]:
    base = tmp_path_factory.mktemp("up_settings")
    repo = base / "repo"
    for name in ("first", "later", "cold"):
        with_params(make_python_identity(repo, name), scale_to_zero_grace_s=300)
    server = UpProcess(
        repo,
        "--warm-pool", "1",
        "--preload-frameworks", "",
        "--no-image-build",
        "--log-file", str(base / "up.log"),
        "--trace-config", f"triton,file={base / 'trace.log'}",
        "--trace-config", "level=TIMESTAMPS",
    )  # fmt: skip
    yield server, base
    server.stop()


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _post(url: str, body: bytes) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _wake(server: UpProcess, model: str) -> str:
    """Infer on `model` (at zero: its wake) and return its replica's URL."""
    client = httpclient.InferenceServerClient(server.hostport)
    x = httpclient.InferInput("INPUT0", [2], "FP32")
    x.set_data_from_numpy(np.ones(2, np.float32))
    assert client.infer(model, [x]).as_numpy("OUTPUT0").tolist() == [1.0, 1.0]
    replicas = server.model(model)["replicas"]
    assert replicas, server.model(model)
    return str(replicas[0]["url"])


def test_log_settings_reach_the_replicas_woken_later_and_those_warm(
    up: tuple[UpProcess, Path],
) -> None:
    server, base = up
    http = httpclient.InferenceServerClient(server.hostport)
    assert http.get_log_settings()["log_file"] == str(base / "up.log")
    first = _wake(server, "first")  # warm before the change
    assert _get(first + "/v2/logging")["log_verbose_level"] == 0
    changed = http.update_log_settings({"log_verbose_level": 1, "log_format": "ISO8601"})
    assert (changed["log_verbose_level"], changed["log_format"]) == (1, "ISO8601")
    server.wait_for(
        lambda: _get(first + "/v2/logging")["log_verbose_level"] == 1, 10, "the warm replica"
    )
    later = _wake(server, "later")  # woken after the change
    assert later != first
    server.wait_for(
        lambda: _get(later + "/v2/logging")["log_format"] == "ISO8601", 10, "the woken replica"
    )
    replica = _get(later + "/v2/logging")
    assert replica["log_verbose_level"] == 1 and replica["log_file"] == ""  # its own file
    # The activator's own log follows the format at once: ISO 8601 records from now on.
    http.update_log_settings({"log_info": True})
    lines = (base / "up.log").read_text().splitlines()
    assert lines and lines[-1][:4].isdigit() and lines[-1].split(" ")[0].endswith("Z"), lines[-3:]
    http.update_log_settings({"log_verbose_level": 0, "log_format": "default"})


def test_trace_settings_for_a_model_at_zero_as_on_thaw_serve(up: tuple[UpProcess, Path]) -> None:
    server, base = up
    http = httpclient.InferenceServerClient(server.hostport)
    model = http.update_trace_settings("cold", {"trace_rate": "7"})
    assert model["trace_rate"] == "7" and model["trace_file"] == str(base / "trace.log")
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        got = client.get_trace_settings("cold").settings
        assert list(got["trace_rate"].value) == ["7"]
        assert list(got["trace_level"].value) == ["TIMESTAMPS"]
        with pytest.raises(InferenceServerException, match="Request for unknown model : nope"):
            client.get_trace_settings("nope")
        cleared = client.update_trace_settings("cold", {"trace_rate": None}).settings
        assert list(cleared["trace_rate"].value) == ["1000"]
    assert server.model("cold")["replicas"] == []  # still at zero: settings wake nothing


@pytest.mark.parametrize("path", ["../../etc/passwd", "/tmp/thaw-up-evil.log"])
def test_no_client_names_a_file_through_thaw_up(up: tuple[UpProcess, Path], path: str) -> None:
    server, _ = up
    for url, key in (("/v2/logging", "log_file"), ("/v2/trace/setting", "trace_file")):
        status, body = _post(server.url + url, json.dumps({key: path}).encode())
        assert status == 501 and "can not be updated through network protocol" in body["error"]
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        with pytest.raises(InferenceServerException, match="can not be updated") as info:
            client.update_log_settings({"log_file": path})
        assert info.value.status() == str(grpc.StatusCode.UNIMPLEMENTED)
    assert not Path("/tmp/thaw-up-evil.log").exists()
    status, body = _post(server.url + "/v2/logging", b'{"log_info": "yes"}')
    assert (status, body) == (400, {"error": "expect boolean for 'log_info'"})


def test_replicas_write_trace_records_by_the_settings_thaw_up_keeps(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    with_params(make_python_identity(repo, "traced"), scale_to_zero_grace_s=300)
    trace = tmp_path / "trace.json"
    server = UpProcess(
        repo, "--warm-pool", "1", "--preload-frameworks", "", "--no-image-build",
        "--trace-config", f"triton,file={trace}", "--trace-config", "level=TIMESTAMPS",
        "--trace-config", "rate=1", "--trace-config", "triton,log-frequency=1",
    )  # fmt: skip
    try:
        url = _wake(server, "traced")  # the replica starts with thaw up's setting

        def records() -> list[dict[str, Any]]:
            files = sorted(tmp_path.glob("trace.json.replica-*.*"))
            return [e for f in files for e in json.loads(f.read_text()) if "model_name" in e]

        server.wait_for(lambda: len(records()) == 1, 10, "the wake's trace record")
        assert records()[0]["model_name"] == "traced"
        http = httpclient.InferenceServerClient(server.hostport)
        http.update_trace_settings("traced", {"trace_level": ["OFF"]})
        server.wait_for(
            lambda: _get(url + "/v2/models/traced/trace/setting")["trace_level"] == ["OFF"],
            10, "the replica told",
        )  # fmt: skip
        _wake(server, "traced")
        assert len(records()) == 1  # off on the replica too
        http.update_trace_settings("traced", {"trace_level": None})
        server.wait_for(
            lambda: _get(url + "/v2/models/traced/trace/setting")["trace_level"] == ["TIMESTAMPS"],
            10, "the replica told",
        )  # fmt: skip
        _wake(server, "traced")
        server.wait_for(lambda: len(records()) == 2, 10, "a record again")
        assert not trace.exists()  # the operator's name is each replica's prefix, never written
    finally:
        server.stop()


def test_restricted_logging_and_trace_need_their_header_through_thaw_up(tmp_path: Path) -> None:
    make_python_identity(tmp_path / "repo", "m")
    server = UpProcess(
        tmp_path / "repo", "--warm-pool", "1", "--preload-frameworks", "", "--no-image-build",
        "--http-restricted-api=logging,trace:admin=yes",
        "--grpc-restricted-protocol=logging,trace:admin=yes",
    )  # fmt: skip
    try:
        http = httpclient.InferenceServerClient(server.hostport)
        with pytest.raises(InferenceServerException, match="expecting header 'admin'"):
            http.update_trace_settings("m", {"trace_rate": "5"})
        assert http.get_trace_settings("m", headers={"admin": "yes"})["trace_rate"] == "1000"
        client = grpcclient.InferenceServerClient(server.grpc_address)
        with pytest.raises(InferenceServerException, match="triton-grpc-protocol-admin"):
            client.get_log_settings()
        client.close()
    finally:
        server.stop()
