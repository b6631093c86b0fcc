"""`thaw serve --model-namespacing` (tritonserver's flag) over two real repositories: the same
model name in both, each ensemble running its own repository's model, a request for the shared
name refused with Triton's words, explicit load/unload of it, and hostile command lines.

Repository `a` holds `twice` (add_sub on 4 floats) and the ensemble `ens_a` stepping into it;
`b` holds another `twice` (add_sub on 2 floats) and `ens_b`. A step that ran the other
repository's `twice` would fail on its shape, so a right answer says which model ran.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.namespaced_repos import AMBIGUITY, make_namespaced_repos
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

StartServe = Callable[..., ServeProcess]


@pytest.fixture
def repos(tmp_path: Path) -> tuple[Path, Path]:
    return make_namespaced_repos(tmp_path)


def _run(client: httpclient.InferenceServerClient, model: str, size: int) -> list[float]:
    """The ensemble's SUM of A = 1..size and B = ones."""
    a = np.arange(1, size + 1, dtype=np.float32)
    inputs = []
    for name, data in (("A", a), ("B", np.ones(size, np.float32))):
        tensor = httpclient.InferInput(name, [size], "FP32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    result = client.infer(model, inputs)
    assert result.as_numpy("DIFF").tolist() == (a - 1).tolist()
    return list(result.as_numpy("SUM").tolist())


def _refused(call: Callable[[], object]) -> str:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return str(caught.value.message())


def test_without_namespacing_a_name_in_two_repositories_is_no_model(
    repos: tuple[Path, Path], start_serve: StartServe
) -> None:
    a, b = repos
    server = start_serve(a, f"--model-repository={b}", "--strict-readiness=false")
    with httpclient.InferenceServerClient(server.hostport) as client:
        index = {row["name"]: row for row in client.get_model_repository_index()}
        assert index["twice"]["state"] == "UNAVAILABLE"
        assert "more than one model repository" in index["twice"]["reason"]
        assert index["ens_a"]["state"] == "UNAVAILABLE"  # its step has no model
        assert client.is_model_ready("only_a")


def test_each_ensemble_runs_its_own_repositorys_model_and_the_shared_name_is_refused(
    repos: tuple[Path, Path], start_serve: StartServe
) -> None:
    a, b = repos
    server = start_serve(a, f"--model-repository={b}", "--model-namespacing=true")
    with httpclient.InferenceServerClient(server.hostport) as client:
        assert client.is_server_ready()
        rows = client.get_model_repository_index()
        assert [row["state"] for row in rows if row["name"] == "twice"] == ["READY", "READY"]
        assert _run(client, "ens_a", 4) == [2, 3, 4, 5]
        assert _run(client, "ens_b", 2) == [2, 3]
        assert client.is_model_ready("only_a")  # a name one repository holds resolves
        assert _refused(lambda: client.get_model_metadata("twice")) == AMBIGUITY
        tensors = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in tensors:
            tensor.set_data_from_numpy(np.zeros(4, np.float32))
        assert _refused(lambda: client.infer("twice", tensors)) == AMBIGUITY
    with grpcclient.InferenceServerClient(server.grpc_address) as grpc:
        assert AMBIGUITY in _refused(lambda: grpc.get_model_metadata("twice"))


def test_explicit_load_and_unload_of_the_shared_name(
    repos: tuple[Path, Path], start_serve: StartServe
) -> None:
    a, b = repos
    server = start_serve(
        a, f"--model-repository={b}", "--model-namespacing=true", "--model-control-mode=explicit"
    )
    with httpclient.InferenceServerClient(server.hostport) as client:
        client.load_model("ens_a")  # loads a's `twice` only: the name has one live model
        assert _run(client, "ens_a", 4) == [2, 3, 4, 5]
        assert client.get_model_metadata("twice")["inputs"][0]["shape"] == [4]
        client.load_model("twice")  # Triton applies a load to every model of that name
        assert _refused(lambda: client.get_model_metadata("twice")) == AMBIGUITY
        client.load_model("ens_b")
        assert _run(client, "ens_b", 2) == [2, 3]
        client.unload_model("twice")  # both go
        states = [row.get("state") for row in client.get_model_repository_index()
                  if row["name"] == "twice"]  # fmt: skip
        assert states == ["UNAVAILABLE", "UNAVAILABLE"]


def _serve(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "thaw.cli", *argv],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_hostile_command_lines_are_refused_clearly(repos: tuple[Path, Path]) -> None:
    a, b = repos
    # The same directory under another name (a link) would make every model a duplicate.
    link = a.parent / "a-link"
    link.symlink_to(a, target_is_directory=True)
    twice = _serve("serve", str(a), f"--model-repository={link}", "--model-namespacing=true")
    assert twice.returncode == 2
    assert f"model repository {link} is given twice" in twice.stderr
    missing = _serve("serve", str(a), f"--model-repository={b}-nope", "--model-namespacing=true")
    assert missing.returncode == 2
    assert f"repository {b}-nope is not a directory" in missing.stderr
    bad = _serve("serve", str(a), "--model-namespacing=maybe")
    assert bad.returncode == 2
    assert "'maybe' is not a boolean" in bad.stderr
    # thaw up takes it with its local scaler (tests/integration/activator/
    # test_thaw_up_namespacing.py); its pods serve one repository each.
    up = _serve("up", str(a), "--port", "0", "--model-namespacing=true", "--scaler", "kubernetes")
    assert up.returncode == 2
    assert "--model-namespacing=true needs --scaler local" in up.stderr
    up_twice = _serve("up", str(a), f"--model-repository={link}", "--model-namespacing=true")
    assert up_twice.returncode == 2
    assert f"model repository {link} is given twice" in up_twice.stderr
