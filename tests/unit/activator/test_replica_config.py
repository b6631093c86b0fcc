"""Configs a python model's own `auto_complete_config` completes are asked of a replica once
(activator.fleet.replica_config), against a tiny replica that answers its config."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from activator.config import ActivatorConfig, ScaleSettings
from activator.surfaces.app import build_app
from tests.fakes.scaler_backend import FakeScalerBackend
from tests.fixtures.models import make_python_identity

_HOOK = (
    "class TritonPythonModel:\n"
    "    @staticmethod\n"
    "    def auto_complete_config(c):\n"
    "        return c\n"
)
COMPLETED = {
    "name": "hooked",
    "backend": "python",
    "max_batch_size": 8,
    "input": [{"name": "IN", "data_type": "TYPE_INT32", "dims": [3]}],
    "output": [{"name": "OUT", "data_type": "TYPE_INT32", "dims": [3]}],
}


class Replica:
    """Answers `/v2/models/{m}[/versions/{v}]/config`; `fail` answers of 500 come first."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.fail = 0

    async def config(self, request: web.Request) -> web.Response:
        self.asked.append(request.path)
        await asyncio.sleep(0.05)  # concurrent askers overlap this
        if self.fail:
            self.fail -= 1
            return web.json_response({"error": "replica is unwell"}, status=500)
        return web.json_response(COMPLETED)


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[str, FakeScalerBackend, Replica]]:
    hooked = make_python_identity(tmp_path, "hooked")
    (hooked / "1" / "model.py").write_text(_HOOK)
    (hooked / "config.pbtxt").write_text('backend: "python"\n')
    make_python_identity(tmp_path, "plain")
    replica = Replica()
    app = web.Application()
    app.router.add_get("/v2/models/{m}/config", replica.config)
    app.router.add_get("/v2/models/{m}/versions/{v}/config", replica.config)
    upstream = TestServer(app, host="127.0.0.1")
    await upstream.start_server()
    backend = FakeScalerBackend(
        url=str(upstream.make_url("")).rstrip("/"), open_gate=True, claim_s=0.0, restore_s=0.0
    )
    config = ActivatorConfig(
        repository=tmp_path, build_images=False, defaults=ScaleSettings(activation_timeout_s=5)
    )
    server = TestServer(build_app(config, backend=backend), host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/"), backend, replica
    await server.close()
    await upstream.close()


async def _get(s: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with s.get(url) as r:
        return r.status, json.loads(await r.read())


async def test_concurrent_first_answers_ask_one_replica_once(
    setup: tuple[str, FakeScalerBackend, Replica],
) -> None:
    url, backend, replica = setup
    paths = ["/v2/models/hooked/config", "/v2/models/hooked", "/v2/models/hooked/versions/1"] * 3
    async with aiohttp.ClientSession() as s:
        answers = await asyncio.gather(*(_get(s, url + p) for p in paths))
        again = await _get(s, url + "/v2/models/hooked/versions/1/config")
    assert all(status == 200 for status, _ in [*answers, again])
    config, metadata = answers[0][1], answers[1][1]
    assert config["max_batch_size"] == 8 and config["input"][0]["dims"] == [3]
    assert metadata["inputs"] == [{"name": "IN", "datatype": "INT32", "shape": [-1, 3]}]
    assert again[1] == config
    assert replica.asked == ["/v2/models/hooked/config"]
    assert backend.starts == 1


async def test_a_failed_answer_is_not_kept(setup: tuple[str, FakeScalerBackend, Replica]) -> None:
    url, _, replica = setup
    replica.fail = 1
    async with aiohttp.ClientSession() as s:
        status, body = await _get(s, url + "/v2/models/hooked/config")
        assert status == 502 and "replica is unwell" in body["error"], body
        status, body = await _get(s, url + "/v2/models/hooked/config")
    assert status == 200 and body["max_batch_size"] == 8
    assert len(replica.asked) == 2


async def test_a_model_without_the_hook_never_wakes(
    setup: tuple[str, FakeScalerBackend, Replica],
) -> None:
    url, backend, replica = setup
    async with aiohttp.ClientSession() as s:
        status, body = await _get(s, url + "/v2/models/plain/config")
        assert status == 200 and body["name"] == "plain"
        assert (await _get(s, url + "/v2/models/nope/config"))[0] == 404
    assert backend.starts == 0 and replica.asked == []
