"""The activator app and its streaming proxy against a tiny upstream replica (tests.fakes)."""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from activator.config import ActivatorConfig, ScaleSettings
from activator.surfaces.app import build_app
from activator.surfaces.proxy import SMALL_BODY
from tests.fakes.loop import eventually
from tests.fakes.scaler_backend import WAKE_DEADLINE_S, FakeScalerBackend
from tests.fakes.upstream import HITS, MODEL_CONFIG, start_upstream


@pytest.fixture
async def upstream() -> AsyncIterator[TestServer]:
    server = await start_upstream(client_max_size=64 * 1024 * 1024)
    yield server
    await server.close()


_SHORT_DEADLINE_S = 1.0


async def _start_activator(
    tmp_path: Path, upstream: TestServer, activation_timeout_s: float
) -> tuple[TestServer, FakeScalerBackend]:
    for name in ("m", "other"):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "config.pbtxt").write_text(MODEL_CONFIG.format(name=name))
    config = ActivatorConfig(
        model_control=True,
        load_models=("*",),  # every model servable at zero (explicit mode: loaded)
        repository=tmp_path,
        build_images=False,
        max_body_bytes=2_000_000,
        defaults=ScaleSettings(activation_timeout_s=activation_timeout_s),
    )
    url = str(upstream.make_url("")).rstrip("/")
    backend = FakeScalerBackend(url=url, open_gate=True, claim_s=0.0, restore_s=0.01)
    server = TestServer(
        build_app(config, backend=backend), host="127.0.0.1", handler_cancellation=True
    )
    await server.start_server()
    return server, backend


@pytest.fixture
async def activator(tmp_path: Path, upstream: TestServer) -> AsyncIterator[tuple[str, Any]]:
    server, backend = await _start_activator(tmp_path, upstream, WAKE_DEADLINE_S)
    yield str(server.make_url("")).rstrip("/"), backend
    await server.close()


@pytest.fixture
async def short_deadline_activator(
    tmp_path: Path, upstream: TestServer
) -> AsyncIterator[tuple[str, Any]]:
    server, backend = await _start_activator(tmp_path, upstream, _SHORT_DEADLINE_S)
    yield str(server.make_url("")).rstrip("/"), backend
    await server.close()


async def test_infer_is_streamed_byte_exact_with_hop_by_hop_headers_stripped(
    activator: tuple[str, FakeScalerBackend],
) -> None:
    url, backend = activator
    body = bytes(range(256)) * 4096  # 1 MiB of binary, as the binary tensor extension sends
    headers = {
        "Inference-Header-Content-Length": "17",
        "Connection": "keep-alive, X-Secret",
        "X-Secret": "hop",
        "Keep-Alive": "timeout=3",
        "X-Custom": "end-to-end",
    }
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{url}/v2/models/m/infer", data=body, headers=headers) as r,
    ):
        assert r.status == 200
        assert await r.read() == body
        seen = json.loads(r.headers["X-Seen"])
        assert "Keep-Alive" not in r.headers  # upstream's hop-by-hop header stripped
    assert seen["inference-header-content-length"] == "17"
    assert seen["x-custom"] == "end-to-end"
    assert "x-secret" not in seen and "keep-alive" not in seen
    assert backend.starts == 1


async def test_compressed_responses_pass_through_untouched(
    activator: tuple[str, FakeScalerBackend],
) -> None:
    url, _ = activator
    async with aiohttp.ClientSession(auto_decompress=False) as s:
        headers = {"X-Behave": "gzip"}
        async with s.post(f"{url}/v2/models/m/infer", data=b"abc" * 100, headers=headers) as r:
            assert r.headers["Content-Encoding"] == "gzip"
            assert gzip.decompress(await r.read()) == b"abc" * 100


async def test_metadata_config_ready_do_not_wake(activator: tuple[str, FakeScalerBackend]) -> None:
    url, backend = activator
    async with aiohttp.ClientSession() as s:
        for path in ["/v2/models/m", "/v2/models/m/versions/1", "/v2/models/m/config"]:
            async with s.get(url + path) as r:
                assert r.status == 200, path
        async with s.get(f"{url}/v2/models/m/ready") as r:
            assert r.status == 200
        async with s.get(f"{url}/v2/models/m") as r:
            meta = await r.json()
        async with s.get(f"{url}/v2/models/m/stats") as r:
            stats = await r.json()
        async with s.post(f"{url}/v2/repository/index") as r:
            index = await r.json()
    assert meta["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [4]}]
    assert stats["model_stats"][0]["inference_count"] == 0
    assert {e["name"] for e in index} == {"m", "other"}
    assert backend.starts == 0  # nothing woke


async def test_errors_are_json_with_the_right_status(
    activator: tuple[str, FakeScalerBackend],
) -> None:
    url, backend = activator
    cases = [
        ("GET", "/v2/models/nope", 404),
        ("GET", "/v2/models/..%2Fetc/config", 404),
        ("POST", "/v2/models/nope/infer", 404),
        ("POST", "/v2/models/m/versions/9/infer", 404),
        ("GET", "/v2/models/m/infer", 405),
        ("GET", "/nowhere", 404),
    ]
    async with aiohttp.ClientSession() as s:
        for method, path, status in cases:
            async with s.request(method, url + path) as r:
                assert r.status == status, path
                assert "error" in await r.json()
        big = b"0" * 2_000_001
        async with s.post(f"{url}/v2/models/m/infer", data=big) as r:
            assert r.status == 413
            assert "limit" in (await r.json())["error"]
    assert backend.starts == 0


async def test_replica_reset_gives_prompt_502_and_leaves_rotation(
    activator: tuple[str, FakeScalerBackend], upstream: TestServer
) -> None:
    url, backend = activator
    async with aiohttp.ClientSession() as s:
        async with s.post(
            f"{url}/v2/models/m/infer", data=b"x", headers={"X-Behave": "reset"}
        ) as r:
            assert r.status == 502
            assert "replica" in (await r.json())["error"]
        await eventually(lambda: backend.stopped != [])
        assert backend.stopped == ["m-1"]  # out of rotation
        async with s.post(f"{url}/v2/models/m/infer", data=b"y") as r:
            assert r.status == 200  # a new replica serves the next request
            assert await r.read() == b"y"
    assert upstream.app is not None
    assert len(upstream.app[HITS]) == 2  # the failed request was not replayed


async def test_replica_dying_mid_response_never_looks_complete(
    activator: tuple[str, FakeScalerBackend],
) -> None:
    url, _ = activator
    async with aiohttp.ClientSession() as s:
        headers = {"X-Behave": "die-mid-response"}
        with pytest.raises(aiohttp.ClientPayloadError):
            async with s.post(f"{url}/v2/models/m/infer", data=b"x", headers=headers) as r:
                await r.read()


async def test_metrics_and_status(activator: tuple[str, FakeScalerBackend]) -> None:
    url, _ = activator
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{url}/v2/models/m/infer", data=b"x") as r:
            assert r.status == 200
        async with s.get(f"{url}/metrics") as r:
            text = await r.text()
        async with s.get(f"{url}/thaw/status") as r:
            status = await r.json()
    assert 'thaw_model_replicas{model="m",state="ready"} 1\n' in text
    assert 'thaw_held_requests{model="other"} 0\n' in text
    assert 'thaw_cold_start_seconds_count{model="m",phase="total"} 1\n' in text
    assert "thaw_activator_request_duration_seconds_bucket" in text
    models = {m["model"]: m for m in status["models"]}
    assert models["m"]["state"] == "warm"
    assert models["other"]["state"] == "cold"
    assert models["m"]["last_cold_start_s"] > 0


async def test_unload_scales_to_zero_and_load_warms(
    activator: tuple[str, FakeScalerBackend],
) -> None:
    url, backend = activator
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{url}/v2/repository/models/other/load") as r:
            assert r.status == 200
        assert backend.starts == 1
        async with s.post(f"{url}/v2/repository/models/other/unload") as r:
            assert r.status == 200
        async with s.get(f"{url}/thaw/status") as r:
            status = await r.json()
    assert backend.stopped == ["other-1"]
    assert {m["model"]: m["state"] for m in status["models"]}["other"] == "cold"


async def test_client_gone_while_held_is_dropped_and_never_forwarded(
    activator: tuple[str, FakeScalerBackend], upstream: TestServer
) -> None:
    url, backend = activator
    backend.gate.clear()
    async with aiohttp.ClientSession() as s:
        sent = time.monotonic()  # the hold, and its activation deadline, start after this
        request = asyncio.create_task(s.post(f"{url}/v2/models/m/infer", data=b"gone"))
        await asyncio.wait_for(backend.start_called.wait(), WAKE_DEADLINE_S)  # held: woke it
        async with s.get(f"{url}/thaw/status") as r:
            held = {m["model"]: m["held_requests"] for m in (await r.json())["models"]}
        assert held["m"] == 1
        request.cancel()  # the client hangs up while held
    async with aiohttp.ClientSession() as s:
        while True:  # until it is dropped: before the activation deadline, so by the hang-up
            async with s.get(f"{url}/thaw/status") as r:
                held = {m["model"]: m["held_requests"] for m in (await r.json())["models"]}
            if held["m"] == 0:
                break
            assert time.monotonic() < sent + WAKE_DEADLINE_S, "still held at the deadline"
            await asyncio.sleep(0.01)
        backend.gate.set()
        async with s.post(f"{url}/v2/models/m/infer", data=b"stays") as r:
            assert await r.read() == b"stays"
    assert upstream.app is not None
    assert upstream.app[HITS] == ["/v2/models/m/infer"]  # only the one that stayed


async def test_held_past_the_activation_timeout_gets_a_json_error(
    short_deadline_activator: tuple[str, FakeScalerBackend],
) -> None:
    url, backend = short_deadline_activator
    backend.gate.clear()  # the replica never becomes ready
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with (
        asyncio.timeout(WAKE_DEADLINE_S),  # answered, never hung
        aiohttp.ClientSession() as s,
        s.post(f"{url}/v2/models/m/infer", data=b"x") as r,
    ):
        body = await r.json()
    assert r.status in (503, 504)
    assert "m" in body["error"]
    assert loop.time() - start >= _SHORT_DEADLINE_S  # held until its deadline, not refused at once


async def test_hostile_bytes_do_not_hurt_the_activator(
    activator: tuple[str, FakeScalerBackend],
) -> None:
    url, _ = activator
    host, port = url.removeprefix("http://").split(":")
    garbage = [
        b"GARBAGE\r\n\r\n",
        b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nshort",
        b"GET /v2/models/" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n",
        b"POST /v2/models/m/infer HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
    ]
    for payload in garbage:
        _reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(payload)
        await writer.drain()
        writer.close()  # hang up mid-request
        await writer.wait_closed()
    async with aiohttp.ClientSession() as s, s.post(f"{url}/v2/models/m/infer", data=b"ok") as r:
        assert r.status == 200
        assert await r.read() == b"ok"


@pytest.mark.parametrize("size", [100, 1_000_000])  # read whole; streamed (over SMALL_BODY)
async def test_a_replica_without_the_model_loaded_is_left_and_the_request_sent_again(
    activator: tuple[str, FakeScalerBackend], upstream: TestServer, size: int
) -> None:
    """A replica that says it does not have the model loaded (evicted from a shared replica,
    or unloaded by another activator, after this one last heard): the request never reached
    the model, so a body in memory goes once more, to a new replica; a streamed one cannot."""
    url, backend = activator
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            f"{url}/v2/models/m/infer",
            data=b"x" * size,
            headers={"X-Behave": "not-loaded-once"},
        ) as r,
    ):
        body = await r.read()
        status = r.status
    if size < SMALL_BODY:
        assert status == 200 and body == b"x" * size
        assert backend.starts == 2 and backend.stopped == ["m-1"]
        assert len(upstream.app[HITS]) == 2
    else:
        assert status == 404 and b"has no available versions" in body
        assert len(upstream.app[HITS]) == 1  # never replayed
        await eventually(lambda: backend.stopped == ["m-1"])  # but left all the same


@pytest.mark.parametrize(
    ("behave", "tries"),
    [("not-loaded", 2), ("not-loaded-other", 1)],  # sent again once at most; only for `m`
)
async def test_a_not_loaded_answer_is_retried_once_and_only_for_the_model_asked(
    activator: tuple[str, FakeScalerBackend], upstream: TestServer, behave: str, tries: int
) -> None:
    url, backend = activator
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{url}/v2/models/m/infer", data=b"x", headers={"X-Behave": behave}) as r,
    ):
        assert r.status == 404
        assert "has no available versions" in (await r.json())["error"]
    assert len(upstream.app[HITS]) == tries
    assert backend.starts == tries
    # Every replica that said so left rotation; one that named another model stays.
    left = ["m-1", "m-2"] if behave == "not-loaded" else []
    await eventually(lambda: backend.stopped == left)
