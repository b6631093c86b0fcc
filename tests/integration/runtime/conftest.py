"""One session-scoped `thaw serve` over a tiny generated repository, shared by these tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from tests.fixtures import models, onnx_models, torch_models
from tests.fixtures.serve_process import ServeProcess
from tests.integration.runtime.server_limits import BODY_TIMEOUT_S, MAX_BODY_BYTES

# Loaded at start; `add_sub_spare` stays unloaded for the repository-extension tests.
PRELOADED = [
    "add_sub",
    "add_onnx",
    "scale_torch",
    "slow",
    "execute_error",
    *(f"identity_{dt.lower()}" for dt in models.IDENTITY_DATATYPES),
]


@pytest.fixture(scope="session")
def runtime_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("runtime_repo")
    models.make_add_sub(repo)
    models.make_add_sub(repo, "add_sub_spare")
    models.make_add_sub(repo, "grpc_spare")  # unloaded: the gRPC load/unload tests' own
    onnx_models.make_onnx_a_plus_b(repo, "add_onnx")
    torch_models.make_torchscript_scale(repo, "scale_torch")
    models.make_slow_request(repo, "slow")
    models.make_always_raises(repo, "execute_error")
    for datatype, config_type in models.IDENTITY_DATATYPES.items():
        models.make_python_identity(repo, f"identity_{datatype.lower()}", data_type=config_type)
    return repo


@pytest.fixture(scope="session")
def runtime_server(runtime_repo: Path) -> Iterator[ServeProcess]:
    args = ["--model-control-mode", "explicit", "--max-body-bytes", str(MAX_BODY_BYTES)]
    # The former spelling of `--body-timeout-s`, still accepted (triton_flags.SECS_ALIASES):
    # test_serve_hostile's body deadline test fails if the alias is not applied.
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
