"""The activator's proxy path end to end: kept-alive replica connections, deadlines, clients
that leave, and answers without a body."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from activator.config import ActivatorConfig, ScaleSettings
from activator.surfaces.app import build_app
from tests.fakes.loop import HUNG_AFTER_S
from tests.fakes.scaler_backend import WAKE_DEADLINE_S, FakeScalerBackend
from tests.fakes.upstream import MODEL_CONFIG

PEERS = web.AppKey("peers", set[int])


async def replica_infer(request: web.Request) -> web.StreamResponse:
    assert request.transport is not None
    request.app[PEERS].add(request.transport.get_extra_info("peername")[1])
    await request.read()
    behave = request.headers.get("X-Behave", "")
    if behave == "slow":
        await asyncio.sleep(5)
    if behave == "no-content":
        return web.Response(status=204)
    if behave in ("stall-mid-response", "endless"):
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(b"x" * 300_000)
        for _ in range(5000 if behave == "endless" else 1):
            await asyncio.sleep(0.01 if behave == "endless" else 5)
            await resp.write(b"y" * 300_000)
        return resp
    seen = {k.lower(): v for k, v in request.headers.items()}
    return web.json_response(seen)


# The request deadline of the tests about it: a replica that answers late is cut off soon.
# Every other test expects its answer, and runs under HUNG_AFTER_S, which a loaded machine
# cannot outlast.
_SHORT_DEADLINE_S = 0.5
short_deadline = pytest.mark.parametrize("served", [_SHORT_DEADLINE_S], indirect=True)


@pytest.fixture
async def served(
    tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[str, FakeScalerBackend, set[int]]]:
    """The activator over one replica app; its request deadline is `HUNG_AFTER_S`, or the
    test's own (`@short_deadline`)."""
    replica = web.Application()
    replica[PEERS] = set()
    replica.router.add_post("/v2/models/{model}/infer", replica_infer)
    upstream = TestServer(replica, host="127.0.0.1")
    await upstream.start_server()
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text(MODEL_CONFIG.format(name="m"))
    config = ActivatorConfig(
        repository=tmp_path,
        build_images=False,
        request_timeout_s=getattr(request, "param", HUNG_AFTER_S),
        # One slot: a request that never gave its slot back would hold up the next one.
        defaults=ScaleSettings(activation_timeout_s=WAKE_DEADLINE_S, container_concurrency=1),
    )
    url = str(upstream.make_url("")).rstrip("/")
    backend = FakeScalerBackend(url=url, open_gate=True, claim_s=0.0, restore_s=0.01)
    server = TestServer(build_app(config, backend=backend), host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/"), backend, replica[PEERS]
    await server.close()
    await upstream.close()


async def test_warm_requests_reuse_one_replica_connection(
    served: tuple[str, FakeScalerBackend, set[int]],
) -> None:
    url, _, peers = served
    async with aiohttp.ClientSession() as s:
        for i in range(20):
            async with s.post(f"{url}/v2/models/m/infer", data=b"%d" % i) as r:
                assert r.status == 200
                seen = await r.json()
    assert len(peers) == 1  # one kept-alive connection carried all twenty
    assert seen["content-length"] == "2" and "expect" not in seen


async def test_expect_100_continue_is_answered_here_and_not_forwarded(
    served: tuple[str, FakeScalerBackend, set[int]],
) -> None:
    url, _, _ = served
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{url}/v2/models/m/infer", data=b"{}", expect100=True) as r,
    ):
        assert r.status == 200
        assert "expect" not in await r.json()


async def test_no_content_passes_through_without_a_body(
    served: tuple[str, FakeScalerBackend, set[int]],
) -> None:
    url, _, _ = served
    async with aiohttp.ClientSession() as s:
        headers = {"X-Behave": "no-content"}
        async with s.post(f"{url}/v2/models/m/infer", data=b"x", headers=headers) as r:
            assert r.status == 204 and await r.read() == b""
        async with s.post(f"{url}/v2/models/m/infer", data=b"x") as r:
            assert r.status == 200  # the connection after a 204 still frames correctly


@short_deadline
async def test_a_silent_replica_is_a_json_504_and_stays_in_rotation(
    served: tuple[str, FakeScalerBackend, set[int]],
) -> None:
    url, backend, _ = served
    async with aiohttp.ClientSession() as s:
        headers = {"X-Behave": "slow"}
        async with s.post(f"{url}/v2/models/m/infer", data=b"x", headers=headers) as r:
            assert r.status == 504
            assert "did not answer within 0.5 s" in (await r.json())["error"]
        async with s.post(f"{url}/v2/models/m/infer", data=b"x") as r:
            assert r.status == 200
    assert backend.stopped == []


@short_deadline
async def test_a_stall_past_the_deadline_mid_response_never_looks_complete(
    served: tuple[str, FakeScalerBackend, set[int]],
) -> None:
    url, _, _ = served
    async with aiohttp.ClientSession() as s:
        headers = {"X-Behave": "stall-mid-response"}
        with pytest.raises(aiohttp.ClientPayloadError):
            async with s.post(f"{url}/v2/models/m/infer", data=b"x", headers=headers) as r:
                assert r.status == 200
                await r.read()


async def test_a_client_leaving_mid_response_does_not_fail_the_replica(
    served: tuple[str, FakeScalerBackend, set[int]],
) -> None:
    url, backend, peers = served
    async with aiohttp.ClientSession() as s:
        headers = {"X-Behave": "endless"}
        async with s.post(f"{url}/v2/models/m/infer", data=b"x", headers=headers) as r:
            await r.content.readexactly(100_000)
        # Leaving the block without reading on closes this client connection.
    await asyncio.sleep(0.2)
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{url}/v2/models/m/infer", data=b"x") as r,
    ):
        assert r.status == 200
        json.loads(await r.read())
    assert backend.stopped == [] and backend.starts == 1
    assert len(peers) == 2  # the unfinished exchange's connection was not reused


@short_deadline
async def test_a_big_body_that_stops_arriving_times_out_and_frees_its_slot(
    served: tuple[str, FakeScalerBackend, set[int]],
) -> None:
    url, _, _ = served
    port = int(url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    # Declared bigger than the proxy reads up front, so it streams; then the client stalls.
    writer.write(
        b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 400000\r\n\r\n"
        + b"x" * 1000
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HUNG_AFTER_S)
    assert head.startswith(b"HTTP/1.1 504")
    writer.close()
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{url}/v2/models/m/infer", data=b"x") as r,
    ):
        assert r.status == 200
