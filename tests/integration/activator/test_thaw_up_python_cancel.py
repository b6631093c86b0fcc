"""Through `thaw up`, a client's cancelled gRPC call reaches a Python model in its replica:
`request.is_cancelled()` turns True while `execute` runs (Triton's qa/L0_backend_python/lifecycle
`test_execute_cancel`), for a model woken from zero by that very call."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from tests.fixtures.models import python_model
from tests.fixtures.python_cancel_model import (
    cancel_model_config,
    cancel_model_source,
    wait_for,
    wait_input,
)
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("up_python_cancel")
    python_model(
        root, "cancel_stub", cancel_model_config("cancel_stub", "process", decoupled=False),
        cancel_model_source(decoupled=False),
    )  # fmt: skip
    return root


@pytest.fixture(scope="module")
def up(repo: Path) -> Iterator[UpProcess]:
    server = UpProcess(repo, "--warm-pool", "1", "--preload-frameworks", "", "--no-image-build")
    assert server.grpc_address, server.log()
    yield server
    server.stop()


def test_a_cancelled_call_through_thaw_up_reaches_the_model(up: UpProcess, repo: Path) -> None:
    done = threading.Event()
    with grpcclient.InferenceServerClient(up.grpc_address) as client:
        call = client.async_infer(
            "cancel_stub", [wait_input(wait=True)], lambda result, error: done.set()
        )
        wait_for(repo / "cancel_stub" / "started")
        call.cancel()
        seen = wait_for(repo / "cancel_stub" / "saw_cancel", repo / "cancel_stub" / "gave_up")
    assert seen.name == "saw_cancel"
    assert done.wait(5)
