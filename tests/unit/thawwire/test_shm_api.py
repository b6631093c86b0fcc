"""The shared-memory extension's REST calls over a real aiohttp server: Triton's shapes and
texts, wrong methods, bad bodies, a register body that never finishes, CUDA's answers."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.fakes.loop import HUNG_AFTER_S
from thawserver.shm_api import RestSharedMemory
from thawserver.shm_registry import SystemSharedMemory


@pytest.fixture
async def client(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[TestClient]:
    """The shared-memory routes; a body is due within `HUNG_AFTER_S`, which a loaded machine
    cannot outlast, or the test's own (`@pytest.mark.parametrize("client", [s], indirect=True)`)."""
    (tmp_path / "obj").write_bytes(b"\0" * 64)
    app = web.Application()
    body_timeout_s = getattr(request, "param", HUNG_AFTER_S)
    RestSharedMemory(
        SystemSharedMemory(shm_dir=tmp_path), body_timeout_s=body_timeout_s
    ).add_routes(app.router)
    async with TestClient(TestServer(app)) as c:
        yield c


async def test_register_status_unregister(client: TestClient) -> None:
    base = "/v2/systemsharedmemory"
    answer = await client.post(f"{base}/region/r/register", json={"key": "/obj", "byte_size": 8})
    assert answer.status == 200
    status = await client.get(f"{base}/status")
    assert await status.json() == [{"name": "r", "key": "/obj", "offset": 0, "byte_size": 8}]
    assert (await client.get(f"{base}/region/r/status")).status == 200
    assert (await client.post(f"{base}/region/r/unregister")).status == 200
    missing = await client.get(f"{base}/region/r/status")
    assert missing.status == 404  # Triton 2.51's NOT_FOUND
    assert await missing.json() == {"error": "Unable to find system shared memory region: 'r'"}
    assert await (await client.get(f"{base}/status")).json() == []


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (b"", "must be a JSON object"),
        (b"[1]", "must be a JSON object"),
        (b"{bad", "failed to parse the request JSON"),
        (b'{"byte_size": 8}', "Shared memory register request has no 'key' field"),
        (b'{"key": "/obj"}', "Shared memory register request has no 'byte_size' field"),
        (b'{"key": 7, "byte_size": 8}', "Unable to parse 'key'"),
        (b'{"key": "/obj", "byte_size": 8, "offset": -1}', "Unable to parse 'offset'"),
        (b'{"key": "/obj", "byte_size": 8.5}', "Unable to parse 'byte_size'"),
    ],
)
async def test_bad_register_bodies(client: TestClient, body: bytes, text: str) -> None:
    answer = await client.post("/v2/systemsharedmemory/region/r/register", data=body)
    assert answer.status == 400
    assert text in (await answer.json())["error"]


@pytest.mark.parametrize("client", [0.3], indirect=True)  # the body that stalls: 408 soon
async def test_methods_names_and_slow_bodies(client: TestClient) -> None:
    wrong = await client.post("/v2/systemsharedmemory/status")
    assert wrong.status == 405 and await wrong.json() == {"error": "Method Not Allowed"}
    assert (await client.get("/v2/systemsharedmemory/region/r/register")).status == 405
    nameless = await client.post("/v2/systemsharedmemory/register", json={})
    assert "'region name' is necessary" in (await nameless.json())["error"]

    async def trickle() -> AsyncIterator[bytes]:
        yield b'{"key": '
        await asyncio.sleep(2)
        yield b'"/obj", "byte_size": 8}'

    slow = await client.post("/v2/systemsharedmemory/region/r/register", data=trickle())
    assert slow.status == 408  # the one body-deadline status (thawserver.body_deadline)
    assert "did not arrive within 0.3 s" in (await slow.json())["error"]


async def test_cuda_is_answered_as_by_a_triton_without_gpus(client: TestClient) -> None:
    base = "/v2/cudasharedmemory"
    assert await (await client.get(f"{base}/status")).json() == []
    assert (await client.post(f"{base}/unregister")).status == 200
    handle = {"b64": base64.b64encode(bytes(64)).decode()}
    refused = await client.post(
        f"{base}/region/g/register", json={"raw_handle": handle, "device_id": 0, "byte_size": 8}
    )
    assert refused.status == 400
    assert await refused.json() == {
        "error": "failed to register CUDA shared memory region: 'g', GPUs not supported"
    }
    unknown = await client.get(f"{base}/region/g/status")
    assert unknown.status == 404  # Triton 2.51's NOT_FOUND (thaw said 400)
    assert await unknown.json() == {"error": "Unable to find cuda shared memory region: 'g'"}


@pytest.mark.parametrize(
    ("body", "text"),
    [  # Triton 2.51's checks of a CUDA register body, in its order and words (it says 500
        # for the member accesses: bad input is 400 here, DESIGN.md)
        ({"byte_size": 8}, "Shared memory register request has no 'raw_handle' field"),
        ({"raw_handle": "x", "device_id": 0, "byte_size": 8},
         "attempt to access non-existing object member 'b64'"),
        ({"raw_handle": {"b64": 5}, "device_id": 0, "byte_size": 8},
         "attempt to access JSON non-string as string"),
        ({"raw_handle": {"b64": ""}, "byte_size": 8},
         "attempt to access non-existing object member 'device_id'"),
        ({"raw_handle": {"b64": "x"}, "device_id": 0},
         "attempt to access non-existing object member 'byte_size'"),
        ({"raw_handle": {"b64": ""}, "device_id": "0", "byte_size": 8},
         "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ({"raw_handle": {"b64": base64.b64encode(bytes(65)).decode()}, "device_id": 0,
          "byte_size": 8}, "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"),
        ({"raw_handle": {"b64": "!!"}, "device_id": 0, "byte_size": 8},
         "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"),
    ],
)  # fmt: skip
async def test_a_cuda_register_body_is_checked_as_triton_checks_it(
    client: TestClient, body: dict[str, object], text: str
) -> None:
    refused = await client.post("/v2/cudasharedmemory/region/g/register", json=body)
    assert (refused.status, await refused.json()) == (400, {"error": text})
