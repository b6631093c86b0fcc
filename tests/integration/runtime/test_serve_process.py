"""`thaw serve` as a process: flags, THAW_LISTENING, warm-pool start, graceful SIGTERM/SIGINT."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fakes.loop import HUNG_AFTER_S
from tests.fixtures import models
from tests.fixtures.serve_process import ServeProcess
from tests.support.stream_shutdown import across_shutdown
from thawserver.connection_drain import DRAIN_IDLE_TIMEOUT_S
from thawwire.grpc_messages import STREAM_STOPPING

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def slow_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("slow_repo")
    models.make_slow_request(repo, "slow")
    models.make_add_sub(repo)
    return repo


def _thaw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "thaw.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _post(url: str, doc: dict, timeout: float = 30) -> tuple[int, dict]:  # type: ignore[type-arg]
    request = urllib.request.Request(url, data=json.dumps(doc).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")
    except (urllib.error.URLError, ConnectionError):
        return 0, {}  # the server closed the connection


def _slow_request(url: str, delay_s: float, results: list[tuple[int, dict]]) -> threading.Thread:  # type: ignore[type-arg]
    doc = {"inputs": [{"name": "DELAY_S", "datatype": "FP32", "shape": [1], "data": [delay_s]}]}
    thread = threading.Thread(
        target=lambda: results.append(_post(url + "/v2/models/slow/infer", doc)), daemon=True
    )
    thread.start()
    return thread


def test_help_lists_the_flags_the_activator_uses() -> None:
    proc = _thaw("--help")
    assert proc.returncode == 0
    for flag in (
        "--port",
        "--model-control-mode",
        "--load-model",
        "--preload-frameworks",
        "--max-body-bytes",
        "--arena-bytes",
        "--cache",
        "--store",
        "THAW_LISTENING",
    ):
        assert flag in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "`--port` = 70000, must be in [0, 65535]"),
        (["--max-body-bytes", "10"], "`--max-body-bytes` = 10, must be in"),
        (["--preload-frameworks", "tensorflow"], "`--preload-frameworks` = 'tensorflow'"),
        (["--log-level", "loud"], "`--log-level` = 'loud'"),
        # a setting no one flag sets keeps its own name
        (["--model-load-thread-count", "0"], "`model_load_threads` = 0, must be in"),
    ],
)
def test_bad_flags_exit_2_naming_the_setting(
    slow_repo: Path, args: list[str], message: str
) -> None:
    proc = _thaw(str(slow_repo), *args)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_missing_repository_exits_2(tmp_path: Path) -> None:
    proc = _thaw(str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert "not a directory" in proc.stderr


def test_warm_pool_start_is_ready_with_nothing_loaded(
    slow_repo: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    server = start_serve(
        slow_repo, "--model-control-mode", "explicit", "--preload-frameworks", "onnxruntime"
    )
    listening = [line for line in server.stdout_lines if line.startswith("THAW_LISTENING")]
    # Every other listener first, the HTTP one last: once it is read, every address is known.
    assert listening == [
        f"THAW_LISTENING_GRPC {server.grpc_address}",
        f"THAW_LISTENING_METRICS {server.metrics_url}",
        f"THAW_LISTENING {server.url}",
    ]
    assert server.url.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(server.url + "/v2/health/ready", timeout=10) as response:
        assert response.status == 200
    status, _ = _post(server.url + "/v2/repository/index", {"ready": True})
    assert status == 200
    assert "preloaded framework onnxruntime" in server.logs()
    status, body = _post(server.url + "/v2/repository/models/add_sub/load", {})
    assert status == 200, body


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_lets_in_flight_requests_finish_then_exits_0(
    slow_repo: Path, start_serve: Callable[..., ServeProcess], signum: signal.Signals
) -> None:
    server = start_serve(slow_repo)
    results: list[tuple[int, dict]] = []  # type: ignore[type-arg]
    begun = models.begun(slow_repo / "slow")
    thread = _slow_request(server.url, 1.5, results)
    models.wait_begun(slow_repo / "slow", begun)  # the request is now inside the model
    started = time.monotonic()
    server.proc.send_signal(signum)
    thread.join(30)
    assert server.proc.wait(30) == 0
    assert results == [(200, results[0][1])]
    assert results[0][1]["outputs"][0]["data"] == [1.5]
    assert time.monotonic() - started < 20
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.url + "/v2/health/live", timeout=5)


def test_exit_timeout_bounds_a_stuck_request(
    slow_repo: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    server = start_serve(slow_repo, "--exit-timeout-secs", "1")
    results: list[tuple[int, dict]] = []  # type: ignore[type-arg]
    begun = models.begun(slow_repo / "slow")
    # The request would take twice the wait below: an exit within it was the 1 s limits'
    # (drain 1 s + unload 1 s), not the request's end, however long a loaded machine makes them.
    thread = _slow_request(server.url, 2 * HUNG_AFTER_S, results)
    models.wait_begun(slow_repo / "slow", begun)
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(HUNG_AFTER_S) == 0, server.logs()
    thread.join(10)
    assert len(results) == 1 and results[0][0] != 200  # cut off, not answered after the limit
    assert "exiting anyway" in server.logs()


@pytest.mark.parametrize(("level", "logged"), [("info", False), ("debug", True)])
def test_requests_are_access_logged_only_at_debug_level(
    slow_repo: Path, level: str, logged: bool
) -> None:
    server = ServeProcess(slow_repo, "--model-control-mode", "explicit", "--log-level", level)
    try:
        server.wait_ready()
        with urllib.request.urlopen(server.url + "/v2/health/live?probe=access", timeout=10):
            pass
    finally:
        assert server.stop() == 0
    assert ("/v2/health/live?probe=access" in server.log_path.read_text()) is logged


def _add_sub_inputs() -> list[httpclient.InferInput]:
    data = np.ones(4, dtype=np.float32)
    inputs = [httpclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
    for one in inputs:
        one.set_data_from_numpy(data)
    return inputs


def test_a_kept_alive_connection_is_served_after_sigint(
    slow_repo: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    # Triton's L0_lifecycle test_shutdown_with_live_connection: told to exit, the server keeps
    # serving the connection a client holds open, and counts down once.
    server = start_serve(slow_repo, "--exit-timeout-secs", "30")
    client = httpclient.InferenceServerClient(server.hostport)
    try:
        client.infer("add_sub", _add_sub_inputs())
        server.proc.send_signal(signal.SIGINT)
        time.sleep(2)
        result = client.infer("add_sub", _add_sub_inputs())  # the same connection, still served
        assert result.as_numpy("OUTPUT0").tolist() == [2.0] * 4
    finally:
        client.close()
    # Its answer said `Connection: close`; once the client is gone the server stops, well
    # before its 30 s exit timeout.
    assert server.proc.wait(25) == 0, server.logs()
    logs = server.logs()
    assert logs.count("Timeout 30: ") == 1, logs
    assert "Waiting for in-flight requests to complete." in logs


def test_an_idle_kept_alive_connection_does_not_hold_the_stop(
    slow_repo: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    server = start_serve(slow_repo, "--exit-timeout-secs", "60")
    client = httpclient.InferenceServerClient(server.hostport)
    try:
        client.infer("add_sub", _add_sub_inputs())
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        # The client never sends again nor closes: its connection is closed once idle for
        # DRAIN_IDLE_TIMEOUT_S, far before the 60 s exit timeout.
        assert server.proc.wait(45) == 0, server.logs()
        assert time.monotonic() - started >= DRAIN_IDLE_TIMEOUT_S - 1
    finally:
        client.close()


def test_a_stream_open_across_the_shutdown_answers_what_is_in_flight_and_refuses_new_requests(
    slow_repo: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    """tritonserver ends its streams when told to exit; thaw serve answers the stream's request
    in flight and refuses, in-stream, one sent after the shutdown began (Triton's
    L0_grpc_state_cleanup `*_shutdownserver` tests expect that error)."""
    server = start_serve(slow_repo)
    results, errors = across_shutdown(
        server.grpc_address,
        slow_repo / "slow",
        lambda: server.proc.send_signal(signal.SIGINT),
        lambda: "shutting down" in server.logs(),
    )
    assert list(results) == ["in-flight"], errors
    assert results["in-flight"].as_numpy("SLEPT_S").tolist() == [1.5]
    assert len(errors) == 1 and STREAM_STOPPING in errors[0], errors
    assert server.proc.wait(30) == 0
