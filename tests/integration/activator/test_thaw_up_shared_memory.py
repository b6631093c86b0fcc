"""`thaw up` owns its clients' system shared-memory regions: tritonclient (HTTP and gRPC) with
tritonclient.utils.shared_memory works through it unchanged, with the cases `thaw serve` passes
(tests/integration/shm_cases), on a connection handed to a replica, and for a model at zero."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from tests.fixtures.models import make_add_sub
from tests.fixtures.up_process import UpProcess, light_args, with_params
from tests.support.shm_cases import SHM_CASES

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo: Path = tmp_path_factory.mktemp("shm_repo")
    with_params(make_add_sub(repo), max_replicas=1)
    server = UpProcess(
        repo,
        *light_args(repo),
        "--model-control-mode", "explicit",
        "--load-model-at-zero=*",  # every model servable at zero, none woken at start
    )  # fmt: skip
    assert server.grpc_address, server.log()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def clients(up: UpProcess) -> Iterator[tuple[Any, Any]]:
    http = httpclient.InferenceServerClient(up.hostport, network_timeout=60)
    grpc = grpcclient.InferenceServerClient(up.grpc_address)
    yield http, grpc
    http.close()
    grpc.close()


@pytest.mark.parametrize("case", sorted(SHM_CASES))
def test_shared_memory(case: str, clients: tuple[Any, Any]) -> None:
    run: Callable[[Any, Any, str], None] = SHM_CASES[case]
    run(*clients, "add_sub")
    assert clients[0].is_server_ready()


def _handoffs(up: UpProcess) -> float:
    pattern = r'thaw_handoffs_total\{model="add_sub",result="handed_off"\} (\S+)'
    found = re.search(pattern, up.metrics())
    return float(found.group(1)) if found else 0.0


def _round_trip(http: Any, registrar: Any) -> None:
    """Register with `registrar`, infer with `http`: the sum and difference land in regions."""
    names = [f"u{uuid.uuid4().hex[:10]}" for _ in range(4)]
    handles = [shm.create_shared_memory_region(n, "/" + n, 16) for n in names]
    try:
        for n in names:
            registrar.register_system_shared_memory(n, "/" + n, 16)
        a, b = np.arange(4, dtype=np.float32), np.full(4, 2.0, dtype=np.float32)
        shm.set_shared_memory_region(handles[0], [a])
        shm.set_shared_memory_region(handles[1], [b])
        inputs = [httpclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
        outputs = [httpclient.InferRequestedOutput(f"OUTPUT{i}") for i in (0, 1)]
        for i in (0, 1):
            inputs[i].set_shared_memory(names[i], 16)
            outputs[i].set_shared_memory(names[2 + i], 16)
        http.infer("add_sub", inputs, outputs=outputs)
        out0 = shm.get_contents_as_numpy(handles[2], np.float32, [4])
        out1 = shm.get_contents_as_numpy(handles[3], np.float32, [4])
        np.testing.assert_array_equal(out0, a + b)
        np.testing.assert_array_equal(out1, a - b)
    finally:
        for n, handle in zip(names, handles, strict=True):
            registrar.unregister_system_shared_memory(n)
            shm.destroy_shared_memory_region(handle)


def test_a_handed_off_connection_sends_shared_memory_requests_back(
    up: UpProcess, clients: tuple[Any, Any]
) -> None:
    """A fresh connection whose first request is an infer is handed to the replica; the
    replica sends a request naming the client's regions back to the activator, who owns
    them, and the client gets its answer as from Triton."""
    registrar, _ = clients
    registrar.load_model("add_sub")  # warm: new connections to it are handed off
    before = _handoffs(up)
    fresh = httpclient.InferenceServerClient(up.hostport, network_timeout=60)
    try:
        _round_trip(fresh, registrar)
    finally:
        fresh.close()
    assert _handoffs(up) > before, "the connection was not handed off"


def test_a_model_at_zero_is_woken_for_a_shared_memory_request(
    up: UpProcess, clients: tuple[Any, Any]
) -> None:
    http, _ = clients
    # To zero, still loaded: the next request is held while it wakes.
    r = requests.post(f"{up.url}/thaw/models/add_sub/scale-to-zero", timeout=60)
    assert r.status_code == 200, r.text
    assert up.model("add_sub")["replicas_ready"] == 0
    _round_trip(http, http)
    assert http.is_model_ready("add_sub")
