"""`thaw serve` run with tritonserver's command line: several repositories, the surfaces it
allows, readiness and exit-on-error as Triton's, the metrics port, and a flag value it cannot
read refused by name."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.fixtures.models import make_add_sub, make_python_identity
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

StartServe = Callable[..., ServeProcess]


def _thaw(*argv: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "thaw.cli", "serve", *argv],
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _broken(repo: Path) -> None:
    model = make_python_identity(repo, "broken")
    (model / "1" / "model.py").write_text("raise RuntimeError('cannot import this model')\n")


def test_a_tritonserver_flag_value_thaw_cannot_read_is_refused_by_name(tmp_path: Path) -> None:
    # Every flag of tritonserver 2.51 is taken now (the catch for one Thaw lacks:
    # tests/unit/runtime/test_triton_flags.py); a value it cannot read exits 2 naming it.
    refused = "`--min-supported-compute-capability` = 'sm_75', must be a compute capability"
    for given in (["--min-supported-compute-capability=sm_75"],
                  ["--min-supported-compute-capability", "sm_75"]):  # fmt: skip
        proc = _thaw(f"--model-repository={tmp_path}", *given)
        assert proc.returncode == 2
        assert refused in proc.stderr


def test_several_repositories_serve_every_model_and_a_duplicate_is_unavailable(
    tmp_path: Path, start_serve: StartServe
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make_add_sub(a)
    make_python_identity(b, "identity")
    make_python_identity(a, "twice")
    make_python_identity(b, "twice")
    server = start_serve(
        a, f"--model-repository={b}", "--strict-readiness=false",
        "--backend-directory=/opt/tritonserver/backends", "--log-verbose=1",
        ready=True,
    )  # fmt: skip
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        index = {m.name: m for m in client.get_model_repository_index().models}
        assert index["add_sub"].state == index["identity"].state == "READY"
        assert index["twice"].state == "UNAVAILABLE"
        assert "more than one model repository" in index["twice"].reason
        assert "(--model-repository #1: .; #2: .)" in index["twice"].reason  # paths cut
        tensor = grpcclient.InferInput("INPUT0", [2], "FP32")
        tensor.set_data_from_numpy(np.array([1, 2], np.float32))
        assert client.infer("identity", [tensor]).as_numpy("OUTPUT0").tolist() == [1, 2]
        assert client.is_server_ready()  # --strict-readiness=false: a failed model is fine
    # Where Python-based backends are found: one that does not exist holds none.
    assert "--backend-directory" not in server.logs()
    assert "restore+digest" in server.logs()  # a verbose line: --log-verbose=1


def test_strict_readiness_and_exit_on_error(tmp_path: Path, start_serve: StartServe) -> None:
    make_add_sub(tmp_path)
    _broken(tmp_path)
    strict = start_serve(tmp_path, ready=False)
    deadline = time.monotonic() + 60
    while _get(strict.url + "/v2/models/add_sub/ready")[0] != 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert _get(strict.url + "/v2/health/ready")[0] == 503  # Triton's default: strict
    with grpcclient.InferenceServerClient(strict.grpc_address) as client:
        assert client.is_server_live() and not client.is_server_ready()
    relaxed = start_serve(tmp_path, "--strict-readiness=false", ready=True)
    assert _get(relaxed.url + "/v2/health/ready")[0] == 200
    proc = _thaw(str(tmp_path), "--port", "0", "--exit-on-error=true", timeout_s=120)
    assert proc.returncode == 1
    assert "failed to load all models: broken:" in proc.stderr
    assert "cannot import this model" in proc.stderr


def test_only_the_surfaces_allowed_are_served(tmp_path: Path, start_serve: StartServe) -> None:
    make_add_sub(tmp_path)
    no_grpc = start_serve(tmp_path, "--allow-grpc=false", "--allow-metrics=false")
    assert no_grpc.grpc_address == "" and no_grpc.metrics_url == ""
    assert not any("THAW_LISTENING_" in line for line in no_grpc.stdout_lines)
    status, body = _get(no_grpc.url + "/metrics")
    assert status == 404 and "error" in json.loads(body)
    grpc_only = ServeProcess(tmp_path, "--allow-http=false")
    try:
        deadline = time.monotonic() + 60
        while not grpc_only.grpc_address:
            assert grpc_only.proc.poll() is None and time.monotonic() < deadline, grpc_only.logs()
            time.sleep(0.05)
        with grpcclient.InferenceServerClient(grpc_only.grpc_address) as client:
            while not client.is_server_ready():
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert client.is_model_ready("add_sub")
        assert not any(line.startswith("THAW_LISTENING ") for line in grpc_only.stdout_lines)
    finally:
        assert grpc_only.stop() == 0


def test_the_metrics_port_serves_metrics_only(tmp_path: Path, start_serve: StartServe) -> None:
    make_add_sub(tmp_path)
    server = start_serve(tmp_path)
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        inputs = [grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.ones(4, np.float32))
        for _ in range(3):
            client.infer("add_sub", inputs)
    series = 'nv_inference_count{model="add_sub",version="1"} 3\n'
    for url in (server.metrics_url, server.url):  # Triton's port, and the HTTP port too
        status, body = _get(url + "/metrics")
        assert status == 200 and series in body.decode()
    status, body = _get(server.metrics_url + "/v2/health/ready")
    assert status == 404 and "error" in json.loads(body)
    # tritonserver's start lines, which launch scripts wait for, with the bound addresses.
    logs = server.logs()
    assert f"Started HTTPService at {server.url.split('//')[1]}" in logs
    assert f"Started GRPCInferenceService at {server.grpc_address}" in logs
    assert f"Started Metrics Service at {server.metrics_url.split('//')[1]}" in logs


def test_an_http_port_in_use_fails_the_start_in_one_line(tmp_path: Path) -> None:
    """The system's reason, once; the start's model loads it stopped are not failures."""
    make_add_sub(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _thaw(str(tmp_path), "--port", str(port), "--grpc-port", "0", "--metrics-port", "0")
    assert proc.returncode == 1
    line = f"thaw serve: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    assert line in proc.stderr.splitlines()
    assert "Errno" not in proc.stderr and "load failed" not in proc.stderr, proc.stderr


def test_a_grpc_port_in_use_fails_the_start_naming_it(tmp_path: Path) -> None:
    make_add_sub(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _thaw(str(tmp_path), "--port", "0", "--grpc-port", str(port))
    assert proc.returncode == 1
    # The system's reason, not grpc's "set GRPC_VERBOSITY=debug" nor its raw C-core log line.
    assert f"cannot listen for gRPC on 127.0.0.1:{port}: Address already in use" in proc.stderr
    assert "Traceback" not in proc.stderr and "add_port.cc" not in proc.stderr


@pytest.mark.parametrize("surface", ["http", "grpc"])
def test_a_port_in_use_is_the_last_line_a_failed_start_prints(tmp_path: Path, surface: str) -> None:
    """After the shutdown's log, the reason is the last line, in `thaw up`'s form (it was an
    ERROR line followed by the shutdown's and each model's cancelled load)."""
    make_add_sub(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        ports = ["--port", port] if surface == "http" else ["--port", "0", "--grpc-port", port]
        proc = _thaw(str(tmp_path), *ports, "--metrics-port", "0")
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("thaw serve: error: cannot listen"), last
    assert f"127.0.0.1:{port}" in last
