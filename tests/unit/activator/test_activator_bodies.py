"""Request bodies at the activator: chunked bodies over the cap, slow bodies, JSON parse errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from activator.config import ActivatorConfig, ScaleSettings
from activator.surfaces.app import build_app
from tests.fakes.loop import HUNG_AFTER_S
from tests.fakes.scaler_backend import WAKE_DEADLINE_S, FakeScalerBackend
from tests.fakes.upstream import HITS, MODEL_CONFIG, start_upstream
from thawserver.aiohttp_compat import JsonErrorRunner


@pytest.fixture
async def served(
    tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[str, int, FakeScalerBackend, list[str]]]:
    """The activator over a fake upstream; its request deadline (which bounds reading a body
    too) is `HUNG_AFTER_S`, which a loaded machine cannot outlast, or the test's own
    (`@pytest.mark.parametrize("served", [seconds], indirect=True)`)."""
    upstream = await start_upstream()
    assert upstream.app is not None
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text(MODEL_CONFIG.format(name="m"))
    config = ActivatorConfig(
        repository=tmp_path,
        build_images=False,
        max_body_bytes=100_000,
        request_timeout_s=getattr(request, "param", HUNG_AFTER_S),
        defaults=ScaleSettings(activation_timeout_s=WAKE_DEADLINE_S),
    )
    url = str(upstream.make_url("")).rstrip("/")
    backend = FakeScalerBackend(url=url, open_gate=True, claim_s=0.0, restore_s=0.01)
    runner = JsonErrorRunner(build_app(config, backend=backend), handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}", port, backend, upstream.app[HITS]
    await runner.cleanup()
    await upstream.close()


async def _raw(
    port: int, data: bytes, *, wait_s: float = HUNG_AFTER_S
) -> tuple[int, dict[str, Any]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), wait_s)
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        body = await asyncio.wait_for(reader.readexactly(length), wait_s)
    finally:
        writer.close()
    return int(head.split(b" ")[1]), json.loads(body)


async def test_chunked_body_over_the_cap_is_413_and_never_forwarded(served: Any) -> None:
    url, _, backend, hits = served

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(30):
            yield b"0" * 10_000

    async with aiohttp.ClientSession() as s, s.post(f"{url}/v2/models/m/infer", data=chunks()) as r:
        assert r.status == 413
        assert "maximum allowed input size of 100000 bytes" in (await r.json())["error"]
    assert backend.starts == 0 and hits == []


async def test_chunked_body_under_the_cap_is_forwarded_whole(served: Any) -> None:
    url, _, _, hits = served

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield b"1" * 1000

    async with aiohttp.ClientSession() as s, s.post(f"{url}/v2/models/m/infer", data=chunks()) as r:
        assert r.status == 200
    assert hits == ["/v2/models/m/infer"]


@pytest.mark.parametrize("served", [0.5], indirect=True)  # the body never ends: 408 soon
async def test_a_slow_body_gets_408_without_taking_a_replica_slot(served: Any) -> None:
    _, port, backend, hits = served
    request = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{"
    status, body = await _raw(port, request)
    assert status == 408
    assert "not received within 0.5 s" in body["error"]
    assert backend.starts == 0 and hits == []


async def test_unparsable_requests_get_json_400(served: Any) -> None:
    _, port, _, _ = served
    for raw in (b"GARBAGE\r\n\r\n", b"GET /v2 HTTP/1.1\r\nContent-Length: x\r\n\r\n"):
        status, body = await _raw(port, raw)
        assert status == 400
        assert set(body) == {"error"} and body["error"]
