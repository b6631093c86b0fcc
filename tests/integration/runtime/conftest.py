"""One session-scoped `thaw serve` over a tiny generated repository, shared by these tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from tests.fixtures import model_repos
from tests.fixtures.serve_process import ServeProcess
from tests.integration.runtime.server_limits import BODY_TIMEOUT_S, MAX_BODY_BYTES

# Loaded at start; `add_sub_spare` stays unloaded for the repository-extension tests.
PRELOADED = [
    "add_sub",
    "add_onnx",
    "scale_torch",
    "slow",
    "execute_error",
    *(f"identity_{dt.lower()}" for dt in model_repos.IDENTITY_DATATYPES),
]


@pytest.fixture(scope="session")
def runtime_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("runtime_repo")
    model_repos.add_python_add_sub(repo)
    model_repos.add_python_add_sub(repo, "add_sub_spare")
    model_repos.add_onnx_add(repo)
    model_repos.add_torchscript_scale(repo)
    model_repos.add_python_slow(repo)
    model_repos.add_python_error(repo)
    for datatype in model_repos.IDENTITY_DATATYPES:
        model_repos.add_python_identity(repo, f"identity_{datatype.lower()}", datatype)
    return repo


@pytest.fixture(scope="session")
def runtime_server(runtime_repo: Path) -> Iterator[ServeProcess]:
    args = ["--model-control-mode", "explicit", "--max-body-bytes", str(MAX_BODY_BYTES)]
    args += ["--body-timeout-secs", str(BODY_TIMEOUT_S)]
    for name in PRELOADED:
        args += ["--load-model", name]
    server = ServeProcess(runtime_repo, *args)
    try:
        server.wait_ready()
        yield server
    finally:
        rc = server.stop()
    assert rc == 0, server.logs()


@pytest.fixture(scope="session")
def client(runtime_server: ServeProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(runtime_server.hostport, network_timeout=60)
    yield c
    c.close()
