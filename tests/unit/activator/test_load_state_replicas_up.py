"""`thaw up --model-control-mode explicit` and the replicas of a model's load state
(docs/decisions/0024), in front of a fake scaler backend whose replicas take handed-off
connections and a tiny upstream replica: `thaw.min_replicas` holds only while the model is
loaded (none before its load, none after its unload), and an unload first tells each replica
holding direct connections to unload the model, so that they stop answering for it while they
drain."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from activator.config import ActivatorConfig
from activator.fleet.fleet import Fleet
from activator.surfaces.app import FLEET, build_app
from tests.fakes.loop import settle, turns
from tests.fakes.scaler_backend import FakeScalerBackend
from tests.fakes.upstream import model_dir

_UNLOADS = web.AppKey("unloads", list[tuple[str, list[str]]])
_UNLOADED = web.AppKey("unloaded", set[str])
_EXECUTIONS = 5  # what each replica has served, by its statistics


class _Link:
    """A replica's handoff socket as the endpoint sees it (connections set by the test)."""

    def __init__(self) -> None:
        self.connected = True
        self.connections = 0
        self.in_flight = 0

    def sample(self, now: float) -> float:
        return 0.0

    async def quiesce(self, timeout_s: float) -> None:
        """Its connections are idle: a draining replica may be stopped at once."""


class _LinkedBackend(FakeScalerBackend):
    def __init__(self, url: str) -> None:
        super().__init__(url=url, open_gate=True, claim_s=0.0, restore_s=0.01)
        self.links: dict[str, _Link] = {}

    def handoff_link(self, replica_id: str) -> _Link:
        return self.links.setdefault(replica_id, _Link())


async def _replica(backend: list[_LinkedBackend]) -> TestServer:
    """The upstream replica (every replica's): its unload calls recorded with what was stopped
    by then; its statistics, refused for a model it unloaded (as `thaw serve`'s)."""

    async def unload(request: web.Request) -> web.Response:
        model = request.match_info["model"]
        request.app[_UNLOADS].append((model, list(backend[0].stopped)))
        request.app[_UNLOADED].add(model)
        return web.json_response({})

    async def stats(request: web.Request) -> web.Response:
        model = request.match_info["model"]
        if model in request.app[_UNLOADED]:
            return web.json_response({"error": f"model '{model}' is not ready"}, status=400)
        row = {"name": model, "version": "1", "execution_count": _EXECUTIONS}
        return web.json_response({"model_stats": [row]})

    app = web.Application()
    app[_UNLOADS], app[_UNLOADED] = [], set()
    app.router.add_post("/v2/repository/models/{model}/unload", unload)
    app.router.add_get("/v2/models/{model}/stats", stats)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


@pytest.fixture
async def up(tmp_path: Path) -> AsyncIterator[tuple[str, _LinkedBackend, TestServer, Fleet]]:
    holder: list[_LinkedBackend] = []
    upstream = await _replica(holder)
    for name in ("kept", "plain"):
        model = model_dir(tmp_path, name, 1)
        with (model / "config.pbtxt").open("a") as file:
            file.write('parameters { key: "thaw.min_replicas" value { string_value: "1" } }\n')
    config = ActivatorConfig(
        model_control=True, repository=tmp_path, build_images=False, load_models=("plain",)
    )
    backend = _LinkedBackend(str(upstream.make_url("")).rstrip("/"))
    holder.append(backend)
    app = build_app(config, backend=backend)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/"), backend, upstream, app[FLEET]
    await server.close()
    await upstream.close()


async def _executions(url: str, model: str) -> int:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/v2/models/{model}/stats") as r:
        return int((await r.json())["model_stats"][0]["execution_count"])


async def _post(url: str, path: str) -> int:
    async with aiohttp.ClientSession() as s, s.post(f"{url}{path}") as r:
        return r.status


async def test_min_replicas_come_with_the_load_and_go_with_the_unload(up: Any) -> None:
    url, backend, _, fleet = up
    kept, plain = fleet.endpoint("kept"), fleet.endpoint("plain")
    await settle(lambda: plain.ready_count == 1)  # loaded at start: its minimum
    kept.tick()
    await turns()
    assert (kept.desired, kept.ready_count, backend.starts) == (0, 0, 1)  # not loaded: none
    assert await _post(url, "/v2/repository/models/kept/load") == 200
    kept.tick()
    assert (kept.desired, kept.ready_count) == (1, 1)
    assert await _post(url, "/v2/repository/models/kept/unload") == 200
    for _ in range(3):
        kept.tick()
        await turns()
    assert (kept.desired, kept.ready_count, kept.running_count) == (0, 0, 0)
    assert backend.starts == 2  # nothing started again after the unload
    assert await _post(url, "/v2/repository/models/kept/load") == 200  # loaded again: kept
    kept.tick()
    assert (kept.desired, kept.ready_count) == (1, 1)


async def test_unload_tells_replicas_with_direct_connections_first(up: Any) -> None:
    url, backend, upstream, fleet = up
    assert await _post(url, "/v2/repository/models/kept/load") == 200
    (replica,) = fleet.endpoint("kept").replicas
    backend.handoff_link(replica.id).connections = 2  # clients' connections handed to it
    assert await _post(url, "/v2/repository/models/kept/unload") == 200
    # Unloaded on the replica before it was stopped: its handed-off connections' requests
    # for the model go to the front door, which refuses them, while it drains.
    assert upstream.app[_UNLOADS] == [("kept", [])]
    assert replica.id in backend.stopped
    plain = fleet.endpoint("plain")
    await settle(lambda: plain.ready_count == 1)  # loaded at start: its minimum
    (other,) = plain.replicas  # no direct connection: only drained
    assert await _post(url, "/v2/repository/models/plain/unload") == 200
    assert upstream.app[_UNLOADS] == [("kept", [])]
    assert other.id in backend.stopped


async def test_a_replica_told_to_unload_keeps_its_statistics(up: Any) -> None:
    url, backend, upstream, fleet = up
    assert await _post(url, "/v2/repository/models/kept/load") == 200
    (replica,) = fleet.endpoint("kept").replicas
    backend.handoff_link(replica.id).connections = 1
    assert await _post(url, "/v2/repository/models/kept/unload") == 200  # nothing read before
    upstream.app[_UNLOADED].clear()  # loaded again: the next replica answers its own
    assert await _post(url, "/v2/repository/models/kept/load") == 200
    # The unloaded replica's counts were read before it unloaded; they count on.
    assert await _executions(url, "kept") == 2 * _EXECUTIONS
