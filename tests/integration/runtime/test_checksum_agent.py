"""A model whose config names Triton's checksum repository agent, as qa/L0_repoagent_checksum
uses it, on `thaw serve` and through `thaw up`: a file whose MD5 differs from the config's
fails the load in the agent's words (logged with the model's name, as the test greps it); the
right digest loads and serves over HTTP and gRPC; an agent Thaw does not have fails the load."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import make_add_sub
from tests.fixtures.serve_process import ServeProcess
from tests.fixtures.up_process import UpProcess, light_args

pytestmark = pytest.mark.integration


def _checked(model: Path, digest: str, agent: str = "checksum") -> None:
    """Append a `model_repository_agents` section naming `agent` with 1/model.py's `digest`."""
    config = model / "config.pbtxt"
    config.write_text(
        config.read_text()
        + f'model_repository_agents {{ agents [ {{ name: "{agent}", parameters [ '
        f'{{ key: "MD5:1/model.py", value: "{digest}" }} ] }} ] }}\n'
    )


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()


def _infer(module: object, url: str, model: str) -> np.ndarray:
    a = np.arange(4, dtype=np.float32)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, [4], "FP32")  # type: ignore[attr-defined]
        tensor.set_data_from_numpy(a)
        inputs.append(tensor)
    with module.InferenceServerClient(url) as client:  # type: ignore[attr-defined]
        return client.infer(model, inputs).as_numpy("OUTPUT0")


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    good = make_add_sub(root, "good")
    _checked(good, _md5(good / "1" / "model.py"))
    _checked(make_add_sub(root, "bad"), "invalid_checksum")
    _checked(make_add_sub(root, "other_agent"), "x", agent="decrypt")
    return root


def test_thaw_serve_checks_the_digests_at_each_load(
    start_serve: Callable[..., ServeProcess], repo: Path
) -> None:
    server = start_serve(repo, "--model-control-mode=explicit")
    grpc_url = server.grpc_address
    with httpclient.InferenceServerClient(server.hostport) as client:
        client.load_model("good")
        for module, url in ((httpclient, server.hostport), (grpcclient, grpc_url)):
            assert _infer(module, url, "good").tolist() == [0, 2, 4, 6]
        got = _md5(repo / "bad" / "1" / "model.py")
        with pytest.raises(InferenceServerException) as refused:
            client.load_model("bad")
        words = f"Mismatched MD5 hash for file 1/model.py, expect: invalid_checksum, got: {got}"
        assert words in str(refused.value)
        assert not client.is_model_ready("bad")
        with pytest.raises(InferenceServerException) as unknown:
            client.load_model("other_agent")
        assert "unable to find 'libtritonrepoagent_decrypt.so' for repo agent 'decrypt'" in str(
            unknown.value
        )
        # The right digest written into the config: the next load checks it again and loads.
        config = repo / "bad" / "config.pbtxt"
        config.write_text(config.read_text().replace("invalid_checksum", got))
        client.load_model("bad")
        assert _infer(httpclient, server.hostport, "bad").tolist() == [0, 2, 4, 6]
        # A changed file fails the next load; the loaded version keeps serving (a reload).
        (repo / "bad" / "1" / "model.py").write_text(
            (repo / "bad" / "1" / "model.py").read_text() + "\n# changed\n"
        )
        with pytest.raises(InferenceServerException, match="Mismatched MD5 hash for file"):
            client.load_model("bad")
        assert client.is_model_ready("bad")
    assert "'bad': Mismatched MD5 hash for file 1/model.py" in server.log_path.read_text()


def test_thaw_up_refuses_the_start_given_exit_on_error_and_else_the_wake(
    repo: Path, tmp_path: Path
) -> None:
    argv = [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0",
            *light_args(repo)]  # fmt: skip
    proc = subprocess.run(
        [*argv, "--exit-on-error=true"], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 1, proc.stderr
    assert "failed to load all models: bad: Mismatched MD5 hash for file 1/model.py" in proc.stderr
    assert "other_agent: unable to find 'libtritonrepoagent_decrypt.so'" in proc.stderr
    assert "good:" not in proc.stderr
    up = UpProcess(repo, *light_args(repo))
    try:
        assert _infer(httpclient, up.hostport, "good").tolist() == [0, 2, 4, 6]
        with pytest.raises(InferenceServerException, match="Mismatched MD5 hash for file"):
            _infer(httpclient, up.hostport, "bad")
    finally:
        up.stop()
