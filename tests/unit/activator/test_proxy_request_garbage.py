"""A request proxied by the activator (in path: every request through it, as while a model is
cold, held or shared) is freed when it is answered, not by the garbage collector.

A reference cycle through a request leaves all of it (the client's request, the upstream
exchange, their buffers) to the collector, which then costs more CPU than the request did.
50 requests with the collector off: none of the requests, and nothing of Thaw's, may be among
what it then finds.
"""

from __future__ import annotations

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
from tests.support.request_garbage import left_to_collector, thaw_objects

_ANSWER = {"model_name": "m", "outputs": [{"name": "Y", "datatype": "FP32", "shape": [1],
                                           "data": [1.0]}]}  # fmt: skip


async def _replica_infer(request: web.Request) -> web.Response:
    await request.read()
    return web.json_response(_ANSWER)


@pytest.fixture
async def activator_url(tmp_path: Path) -> AsyncIterator[str]:
    replica = web.Application()
    replica.router.add_post("/v2/models/{model}/infer", _replica_infer)
    upstream = TestServer(replica, host="127.0.0.1")
    await upstream.start_server()
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text(MODEL_CONFIG.format(name="m"))
    config = ActivatorConfig(
        repository=tmp_path,
        build_images=False,
        request_timeout_s=HUNG_AFTER_S,
        defaults=ScaleSettings(activation_timeout_s=WAKE_DEADLINE_S),
    )
    url = str(upstream.make_url("")).rstrip("/")
    backend = FakeScalerBackend(url=url, open_gate=True, claim_s=0.0, restore_s=0.01)
    server = TestServer(build_app(config, backend=backend), host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()
    await upstream.close()


async def test_proxied_requests_leave_nothing_to_the_collector(activator_url: str) -> None:
    body = json.dumps(
        {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    ).encode()
    async with aiohttp.ClientSession() as session:

        async def send() -> None:
            async with session.post(f"{activator_url}/v2/models/m/infer", data=body) as resp:
                assert resp.status == 200, await resp.text()
                assert await resp.json() == _ANSWER

        await send()  # the wake, and the kept-alive connections made
        await send()
        found = await left_to_collector(send, 50)
    assert sum(isinstance(o, web.BaseRequest) for o in found) == 0
    assert thaw_objects(found) == []
