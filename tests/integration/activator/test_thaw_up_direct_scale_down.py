"""Scaling down replicas that clients reach through direct connections.

Found with `thaw up` by hand: clients in a closed loop on handed-off connections got a 502 or a
reset connection at every scale-down, because the replica was stopped under the request each
had just sent; and clients that hung up mid-request left their requests counted for good, so
the model never scaled to zero. Real `thaw up`, real replicas, aiohttp clients.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.fixtures.models import make_slow_execute
from tests.fixtures.up_process import UpProcess, light_args, with_params

pytestmark = pytest.mark.integration

LIMIT_S = 45.0  # per wait; generous: two CPUs, another test run beside this one


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    repo = tmp_path / "repo"
    repo.mkdir()
    with_params(
        make_slow_execute(repo, "busy", delay_s=0.1),
        target_concurrency=2,
        max_replicas=2,
        stable_window_s=6,
        panic_window_s=1,
        scale_to_zero_grace_s=600,
    )
    with_params(make_slow_execute(repo, "hangup", delay_s=2.0), scale_to_zero_grace_s=2)
    server = UpProcess(repo, *light_args(repo), "--direct-max-age-s", "1")
    yield server
    server.stop()


def _body() -> dict[str, object]:
    return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}


def test_busy_direct_clients_see_no_error_when_their_replica_is_scaled_down(
    up: UpProcess,
) -> None:
    url = f"{up.url}/v2/models/busy/infer"
    results: Counter[object] = Counter()

    async def client(until: asyncio.Event) -> None:
        async with aiohttp.ClientSession() as session:  # one keep-alive connection
            while not until.is_set():
                try:
                    async with session.post(url, json=_body()) as response:
                        await response.read()
                        results[response.status] += 1
                except aiohttp.ClientError as exc:
                    results[type(exc).__name__] += 1

    async def wait_until(predicate: object, what: str) -> None:
        deadline = time.monotonic() + LIMIT_S
        while not await asyncio.to_thread(predicate):  # type: ignore[arg-type]
            assert time.monotonic() < deadline, f"no {what} in {LIMIT_S} s\n{up.log()}"
            await asyncio.sleep(0.2)

    async def run() -> None:
        # Wake it: the clients' connections are handed off from then on.
        async with aiohttp.ClientSession() as session, session.post(url, json=_body()) as woke:
            assert woke.status == 200
        burst, steady = asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(client(burst)) for _ in range(6)]
        tasks += [asyncio.create_task(client(steady)) for _ in range(2)]
        await wait_until(lambda: up.model("busy")["replicas_ready"] == 2, "second replica")
        burst.set()  # 2 clients stay: the model needs one replica again
        await wait_until(lambda: len(up.model("busy")["replicas"]) == 1, "scale-down")
        await asyncio.sleep(1.0)  # the clients of the stopped replica went on elsewhere
        steady.set()
        await asyncio.gather(*tasks)

    asyncio.run(run())
    assert "stopped (exit code" in up.log()
    assert set(results) == {200}, (results, up.log()[-4000:])


def test_requests_whose_clients_hung_up_do_not_keep_the_model_warm(up: UpProcess) -> None:
    url = f"{up.url}/v2/models/hangup/infer"

    async def run() -> None:
        async with aiohttp.ClientSession() as session, session.post(url, json=_body()) as woke:
            assert woke.status == 200  # warm: new connections are handed off from now
        for _ in range(3):  # each on its own connection; gone long before the 2 s answer
            async with aiohttp.ClientSession() as session:
                with pytest.raises(TimeoutError):
                    timeout = aiohttp.ClientTimeout(total=0.5)
                    async with session.post(url, json=_body(), timeout=timeout) as response:
                        await response.read()

    asyncio.run(run())
    # Their handlers run on (6 s, one model instance); then the idle grace (2 s): cold.
    up.wait_for(lambda: up.model("hangup")["state"] == "cold", LIMIT_S, "scale to zero")
