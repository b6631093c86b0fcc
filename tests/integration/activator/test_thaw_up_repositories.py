"""`thaw up` started with tritonserver's repository flags, for real on loopback: REPO plus
`--model-repository` serve one index (a model of the second repository wakes and answers; a
name in both is unavailable, the others served), `--load-model=*` wakes every model at start,
`--strict-model-config` warns as tritonserver does, `--strict-readiness` decides whether
the server reads ready while its `--load-model` wakes are still under way, and
`--exit-on-error=true` refuses the start for a model whose config is refused, in Triton's words."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import make_add_sub, make_slow_init
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.serve_process import free_port
from tests.fixtures.up_process import LISTENING, UpProcess

pytestmark = pytest.mark.integration

_QUIET = ("--warm-pool", "1", "--preload-frameworks", "", "--no-image-build")


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    a, b = tmp_path_factory.mktemp("repo_a"), tmp_path_factory.mktemp("repo_b")
    make_add_sub(a, "only_a")
    make_add_sub(a, "twice")
    make_add_sub(b, "only_b")
    make_add_sub(b, "twice")
    server = UpProcess(
        a, f"--model-repository={b}", *_QUIET, "--cache", str(a.parent / "cache"),
        "--model-control-mode=explicit", "--load-model=*", "--strict-model-config=true",
    )  # fmt: skip
    yield server
    server.stop()


def test_the_models_of_both_repositories_are_one_index(up: UpProcess) -> None:
    with httpclient.InferenceServerClient(up.hostport) as client:
        rows = {row["name"]: row for row in client.get_model_repository_index()}
    assert {rows["only_a"]["state"], rows["only_b"]["state"]} == {"READY"}
    assert rows["twice"]["state"] == "UNAVAILABLE"
    assert "is in more than one model repository" in rows["twice"]["reason"]
    assert "must be unique across all model repositories" in rows["twice"]["reason"]
    # The paths are cut from a client's copy (HTTP and gRPC), the repositories' numbers stay.
    assert "(--model-repository #1: .; #2: .)" in rows["twice"]["reason"]
    with grpcclient.InferenceServerClient(up.grpc_address) as client:
        index = {m.name: m for m in client.get_model_repository_index().models}
        assert "(--model-repository #1: .; #2: .)" in index["twice"].reason
        with pytest.raises(InferenceServerException) as refused:
            client.get_model_metadata("twice")
    assert "more than one model repository" in str(refused.value)
    assert "/tmp/" not in str(refused.value), refused.value  # the repositories are in /tmp


def test_load_model_star_woke_every_model_at_start(up: UpProcess) -> None:
    for name in ("only_a", "only_b"):
        assert up.model(name)["replicas_ready"] >= 1, up.model(name)


def test_a_model_of_the_second_repository_answers(up: UpProcess) -> None:
    x, y = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    inputs = [httpclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(y)
    with httpclient.InferenceServerClient(up.hostport) as client:
        result = client.infer("only_b", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x + y)


def test_strict_model_config_warns_as_tritonserver(up: UpProcess) -> None:
    assert "Warning: '--strict-model-config' has been deprecated!" in up.log_path.read_text()


def _ready_while_loading(repo: Path, strict: str) -> tuple[bool, bool]:
    """Start `thaw up --load-model slow` (a 4 s initialize) on a known port: (whether
    /v2/health/ready answered 200 before the start was done, whether it did after)."""
    port = free_port()
    argv = [
        sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", str(port),
        "--grpc-port", "0", "--metrics-port", "0", *_QUIET,
        "--cache", str(repo.parent / "cache"), "--model-control-mode=explicit",
        "--load-model=slow", f"--strict-readiness={strict}",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None

        def read() -> None:
            assert proc.stdout is not None
            lines.extend(proc.stdout)

        threading.Thread(target=read, daemon=True).start()
        early = False
        deadline = time.monotonic() + 120
        while not any(line.startswith(LISTENING) for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "thaw up did not start"
            # Ready while `slow` still wakes: the status is read after the readiness, so a
            # start that ends between the two reads is never taken for an early answer (the
            # LISTENING line can reach this reader after the server already answers ready).
            early = early or (_ready(port) and _waking(port, "slow"))
            time.sleep(0.1)
        late_deadline = time.monotonic() + 60
        while not _ready(port) and time.monotonic() < late_deadline:
            time.sleep(0.1)
        return early, _ready(port)
    finally:
        proc.terminate()
        proc.wait(30)


def _waking(port: int, model: str) -> bool:
    """Whether `thaw up`'s status shows `model` not yet warm (False if it cannot be read)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/thaw/status", timeout=5) as r:
            models = json.loads(r.read())["models"]
    except (urllib.error.URLError, ConnectionError, ValueError, KeyError):
        return False
    return any(m["model"] == model and m["state"] in ("cold", "waking") for m in models)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=5) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, ConnectionError):
        return False


@pytest.mark.parametrize(("strict", "early"), [("true", False), ("false", True)])
def test_strict_readiness_waits_for_the_models_loaded_at_start(
    tmp_path: Path, strict: str, early: bool
) -> None:
    make_slow_init(tmp_path / "repo", "slow", delay_s=4.0)
    assert _ready_while_loading(tmp_path / "repo", strict) == (early, True)


def test_exit_on_error_false_answers_neither_live_nor_ready(tmp_path: Path) -> None:
    """A repository that is not a directory: refused at start, or with `--exit-on-error=false`
    (tritonserver's test_parse_error_noexit) answering, neither live nor ready on HTTP and
    gRPC, whatever `--strict-readiness` says; metadata and the readable repository answer."""
    make_add_sub(tmp_path / "repo", "m")
    missing = tmp_path / "missing"
    with pytest.raises(RuntimeError, match="is not a directory"):
        UpProcess(tmp_path / "repo", f"--model-repository={missing}", *_QUIET)
    server = UpProcess(
        tmp_path / "repo", f"--model-repository={missing}", *_QUIET, "--exit-on-error=false",
        "--strict-readiness=false", ready=False,
    )  # fmt: skip
    try:
        with httpclient.InferenceServerClient(server.hostport) as client:
            assert not client.is_server_live()
            assert not client.is_server_ready()
            assert client.get_server_metadata()["name"] == "triton"
            assert [row["name"] for row in client.get_model_repository_index()] == ["m"]
        with grpcclient.InferenceServerClient(server.grpc_address) as grpc:
            assert not grpc.is_server_live()
            assert not grpc.is_server_ready()
            assert grpc.get_server_metadata().name == "triton"
        assert "is not a directory" in server.log_path.read_text()
    finally:
        server.stop()


def test_exit_on_error_true_refuses_the_start_for_a_refused_config(tmp_path: Path) -> None:
    """tritonserver's default, given: a model whose config is refused refuses the start (exit
    1), the model and Triton's reason in the log, as `thaw serve --exit-on-error=true`; by
    default the model is unavailable and the others are served."""
    repo = tmp_path / "repo"
    make_add_sub(repo, "good")
    bad = make_add_sub(repo, "bad")
    config = bad / "config.pbtxt"
    config.write_text(config.read_text() + "max_batch_size: -1\n")
    argv = [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0", *_QUIET]
    proc = subprocess.run(
        [*argv, "--exit-on-error=true"], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 1
    assert "failed to load all models: bad: " in proc.stderr
    assert "'max_batch_size' must be non-negative value for bad" in proc.stderr
    server = UpProcess(repo, *_QUIET)
    try:
        with httpclient.InferenceServerClient(server.hostport) as client:
            rows = {row["name"]: row for row in client.get_model_repository_index()}
            assert rows["bad"]["state"] == "UNAVAILABLE"
            assert client.is_model_ready("good")
    finally:
        server.stop()


def test_exit_on_error_true_checks_an_onnx_config_against_its_graph(tmp_path: Path) -> None:
    """What only a session's load checked (the config's dims against the graph's) refuses a
    start given `--exit-on-error=true`, in Triton's words, as tritonserver loads every model
    at its start."""
    repo = tmp_path / "repo"
    bad = make_onnx_add(repo, "onnx_bad", size=4)
    config = bad / "config.pbtxt"
    config.write_text(
        config.read_text().replace("dims: [ 4 ] } ]\noutput", "dims: [ 16 ] } ]\noutput")
    )
    make_onnx_add(repo, "onnx_good")
    argv = [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0", *_QUIET]
    proc = subprocess.run(
        [*argv, "--exit-on-error=true"], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 1, proc.stderr
    assert (
        "failed to load all models: onnx_bad: model 'onnx_bad', tensor 'INPUT0': the model "
        "expects 2 dimensions (shape [-1,4]) but the model configuration specifies 2 "
        "dimensions (an initial batch dimension" in proc.stderr
    )
    assert "onnx_good" not in proc.stderr.split("failed to load all models:")[1]


_HOOKED = """
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({{"name": "INPUT0", "data_type": "TYPE_FP32"{dims}}})
        auto_complete_model_config.add_output(
            {{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]}}
        )
        return auto_complete_model_config

    def execute(self, requests):
        return []
"""


def _hooked(repo: Path, name: str, dims: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(_HOOKED.format(dims=dims))
    (repo / name / "config.pbtxt").write_text('backend: "python"\n')


def test_exit_on_error_true_runs_python_auto_complete_at_start(tmp_path: Path) -> None:
    """A python model's own `auto_complete_config` (which only a replica runs): with
    `--exit-on-error=true` it runs at start, a refusal refusing the start in its words; a
    completed config is then what /config answers."""
    repo = tmp_path / "repo"
    _hooked(repo, "good", ', "dims": [1]')
    _hooked(repo, "bad", "")
    argv = [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0", *_QUIET]
    proc = subprocess.run(
        [*argv, "--exit-on-error=true"], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 1
    assert "failed to load all models: bad: " in proc.stderr
    assert "input 'INPUT0' in auto-complete-config function for model 'bad' is missing 'dims'" in (
        proc.stderr
    )
    shutil.rmtree(repo / "bad")
    server = UpProcess(repo, *_QUIET, "--exit-on-error=true")
    try:
        config = server.get("/v2/models/good/config")
        assert [(t["name"], t["dims"]) for t in config["input"]] == [("INPUT0", [1])]
    finally:
        server.stop()
