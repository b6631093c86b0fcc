"""`thaw up` against slow and idle clients (real process, raw sockets): a head trickled one
byte a second is cut off at `--head-timeout-s`, a stalled body at `--body-timeout-s`, a
kept-alive connection at `--idle-timeout-s`, past `--max-connections` a new connection is
503 — and a replica it starts gets the same deadlines for the connections handed to it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import make_add_sub, make_slow_request
from tests.fixtures.slow_clients import hold_slow_connections
from tests.fixtures.up_process import UpProcess
from tests.support import slow_client_checks as checks

pytestmark = pytest.mark.integration

HEAD_S, BODY_S, IDLE_S = 2.0, 2.0, 2.0


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("up_slow_clients_repo")
    make_add_sub(repo)
    make_slow_request(repo, "slow")
    return repo


def _up(repo: Path, *args: str) -> UpProcess:
    return UpProcess(repo, "--warm-pool", "0", "--no-image-build", *args)


@pytest.fixture(scope="module")
def up(repo: Path) -> Iterator[UpProcess]:
    server = _up(
        repo,
        "--head-timeout-s", str(HEAD_S),
        "--body-timeout-s", str(BODY_S),
        "--idle-timeout-s", str(IDLE_S),
    )  # fmt: skip
    yield server
    assert server.stop() == 0, server.log()


def _hostport(up: UpProcess) -> tuple[str, int]:
    host, port = up.hostport.rsplit(":", 1)
    return host, int(port)


def test_200_slow_heads_are_all_closed_at_the_head_deadline(up: UpProcess) -> None:
    checks.assert_slow_heads_closed(*_hostport(up), 200, HEAD_S)


def test_a_stalled_body_is_cut_off_at_the_body_deadline(up: UpProcess) -> None:
    checks.assert_body_deadline(*_hostport(up), "/v2/models/add_sub/infer", BODY_S)


def test_a_stalled_shared_memory_register_body_gets_the_same_answer(up: UpProcess) -> None:
    checks.assert_body_deadline(*_hostport(up), "/v2/systemsharedmemory/region/r/register", BODY_S)


def test_an_idle_keep_alive_connection_is_closed(up: UpProcess) -> None:
    checks.assert_idle_close(*_hostport(up), IDLE_S)


def test_the_grpc_port_closes_connections_that_never_finish_their_preface(up: UpProcess) -> None:
    checks.assert_grpc_handshake_deadline(up.grpc_address, HEAD_S)


def test_the_metrics_port_has_the_same_head_deadline(up: UpProcess) -> None:
    host, port = up.metrics_url.removeprefix("http://").rsplit(":", 1)
    result = asyncio.run(hold_slow_connections(host, int(port), 20, hold_s=HEAD_S + 6))
    assert result.still_open == 0 and result.statuses == {"408": 20}


def test_a_replica_gets_the_activators_connection_limits(up: UpProcess) -> None:
    """Handed-off connections meet the replica's deadlines: the activator passes its own (a
    pool process forked by the fork server shows the fork server's command line, so this
    asks the replica itself, on its own port)."""
    client = grpcclient.InferenceServerClient(up.grpc_address)
    try:
        a = np.ones(4, dtype=np.float32)
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = grpcclient.InferInput(name, [4], "FP32")
            tensor.set_data_from_numpy(a)
            inputs.append(tensor)
        client.infer("add_sub", inputs)
    finally:
        client.close()
    url = str(up.model("add_sub")["replicas"][0]["url"])
    host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    checks.assert_slow_heads_closed(host, int(port), 20, HEAD_S)
    checks.assert_idle_close(host, int(port), IDLE_S)
    checks.assert_body_deadline(host, int(port), "/v2/models/add_sub/infer", BODY_S)


def test_past_max_connections_http_is_503_and_grpc_calls_are_resource_exhausted(
    repo: Path,
) -> None:
    server = _up(repo, "--max-connections", "2", "--head-timeout-s", "30")
    try:
        checks.assert_cap_refuses(*_hostport(server), 2)
        client = grpcclient.InferenceServerClient(server.grpc_address)
        outcomes: list[str] = []

        def call() -> None:
            tensor = grpcclient.InferInput("DELAY_S", [1], "FP32")
            tensor.set_data_from_numpy(np.array([1.5], dtype=np.float32))
            try:
                client.infer("slow", [tensor], client_timeout=120)
                outcomes.append("ok")
            except InferenceServerException as exc:
                outcomes.append(str(exc.status()))

        call()  # wake the model first: its replica then answers the four at once
        threads = [threading.Thread(target=call) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        client.close()
        assert sorted(outcomes) == ["StatusCode.RESOURCE_EXHAUSTED"] * 2 + ["ok"] * 3
    finally:
        assert server.stop() == 0, server.log()
