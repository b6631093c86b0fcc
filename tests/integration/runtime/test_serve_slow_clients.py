"""`thaw serve` against slow and idle clients (real process, raw sockets): a head trickled one
byte a second is cut off at `--head-timeout-s`, a stalled body at `--body-timeout-s`, a
kept-alive connection at `--idle-timeout-s`; past `--max-connections` a new connection is
503; the gRPC port holds the same deadlines and caps its calls in flight."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import make_add_sub, make_slow_request
from tests.fixtures.serve_process import ServeProcess
from tests.support import slow_client_checks as checks

pytestmark = pytest.mark.integration

HEAD_S, BODY_S, IDLE_S = 2.0, 2.0, 2.0


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("slow_clients_repo")
    make_add_sub(repo)
    make_slow_request(repo, "slow")
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServeProcess]:
    proc = ServeProcess(
        repo,
        "--head-timeout-s", str(HEAD_S),
        "--body-timeout-s", str(BODY_S),
        "--idle-timeout-s", str(IDLE_S),
    )  # fmt: skip
    try:
        proc.wait_ready()
        yield proc
    finally:
        assert proc.stop() == 0, proc.logs()


def _hostport(server: ServeProcess) -> tuple[str, int]:
    host, port = server.hostport.rsplit(":", 1)
    return host, int(port)


def test_200_slow_heads_are_all_closed_at_the_head_deadline(server: ServeProcess) -> None:
    checks.assert_slow_heads_closed(*_hostport(server), 200, HEAD_S)


def test_a_stalled_body_is_cut_off_at_the_body_deadline(server: ServeProcess) -> None:
    checks.assert_body_deadline(*_hostport(server), "/v2/models/add_sub/infer", BODY_S)


def test_a_stalled_shared_memory_register_body_gets_the_same_answer(server: ServeProcess) -> None:
    checks.assert_body_deadline(
        *_hostport(server), "/v2/systemsharedmemory/region/r/register", BODY_S
    )


def test_an_idle_keep_alive_connection_is_closed(server: ServeProcess) -> None:
    checks.assert_idle_close(*_hostport(server), IDLE_S)


def test_the_grpc_port_closes_connections_that_never_finish_their_preface(
    server: ServeProcess,
) -> None:
    checks.assert_grpc_handshake_deadline(server.grpc_address, HEAD_S)


def test_past_max_connections_http_is_503_and_grpc_calls_are_resource_exhausted(
    repo: Path,
) -> None:
    proc = ServeProcess(repo, "--max-connections", "2", "--head-timeout-s", "30")
    try:
        proc.wait_ready()
        checks.assert_cap_refuses(*_hostport(proc), 2)
        client = grpcclient.InferenceServerClient(proc.grpc_address)
        outcomes: list[str] = []

        def call() -> None:
            tensor = grpcclient.InferInput("DELAY_S", [1], "FP32")
            tensor.set_data_from_numpy(np.array([1.5], dtype=np.float32))
            try:
                client.infer("slow", [tensor])
                outcomes.append("ok")
            except InferenceServerException as exc:
                outcomes.append(str(exc.status()))

        threads = [threading.Thread(target=call) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        client.close()
        assert sorted(outcomes) == ["StatusCode.RESOURCE_EXHAUSTED"] * 2 + ["ok"] * 2
    finally:
        assert proc.stop() == 0, proc.logs()


def test_without_the_head_deadline_slow_heads_stay_open(repo: Path) -> None:
    """The counter-test: the same clients against limits turned off are never closed."""
    import asyncio

    from tests.fixtures.slow_clients import hold_slow_connections

    proc = ServeProcess(repo, "--head-timeout-s", "0")
    try:
        proc.wait_ready()
        result = asyncio.run(hold_slow_connections(*_hostport(proc), 50, hold_s=HEAD_S + 2))
        assert result.still_open == 50
    finally:
        assert proc.stop() == 0, proc.logs()
