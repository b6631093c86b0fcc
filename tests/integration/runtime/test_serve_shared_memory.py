"""`thaw serve` implements Triton's system shared-memory extension: tritonclient.http and
tritonclient.grpc with tritonclient.utils.shared_memory, unchanged (tests/integration/shm_cases)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.fixtures.serve_process import ServeProcess
from tests.support.shm_cases import SHM_CASES

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def grpc_client(runtime_server: ServeProcess) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(runtime_server.grpc_address)
    yield client
    client.close()


@pytest.mark.parametrize("case", sorted(SHM_CASES))
def test_shared_memory(
    case: str,
    client: httpclient.InferenceServerClient,
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    run: Callable[[Any, Any, str], None] = SHM_CASES[case]
    run(client, grpc_client, "add_sub")
    assert client.is_server_ready()
