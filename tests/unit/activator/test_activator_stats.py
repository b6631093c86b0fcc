"""Statistics through the activator stay monotonic while replicas come and go.

Every replica is its own in-test HTTP server that counts what it served (from zero, as a fresh
`thaw serve` does) and answers `/v2/models/{m}/stats` in the runtime's shape.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from activator.config import ActivatorConfig, ScaleSettings
from activator.endpoint.replica_stats import zero_stats
from activator.surfaces.app import FLEET, build_app
from tests.fakes.loop import eventually
from tests.fakes.scaler_backend import WAKE_DEADLINE_S, FakeScalerBackend

CONFIG = """
name: "{name}"
backend: "python"
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
version_policy: {{ all {{ }} }}
"""
SERVED = web.AppKey("served", dict[str, int])


async def _replica_infer(request: web.Request) -> web.Response:
    version = request.match_info.get("version", "2")
    request.app[SERVED][version] = request.app[SERVED].get(version, 0) + 1
    return web.json_response({"outputs": []})


async def _replica_stats(request: web.Request) -> web.Response:
    name = request.match_info["model"]
    rows = []
    for version in ("1", "2"):
        n = request.app[SERVED].get(version, 0)
        row = zero_stats(name, version)
        row.update(inference_count=n, execution_count=n, last_inference=1000 * n)
        row["inference_stats"]["success"] = {"count": n, "ns": 7 * n}
        row["batch_stats"] = [{"batch_size": 1, "compute_infer": {"count": n, "ns": 3 * n}}]
        row["memory_usage"] = [{"type": "CPU", "id": 0, "byte_size": 64}]
        rows.append(row)
    return web.json_response({"model_stats": rows})


class ReplicaServers(FakeScalerBackend):
    """The fake scaler backend, with every replica a fresh in-test server."""

    def __init__(self) -> None:
        super().__init__(open_gate=True, claim_s=0.0, restore_s=0.0)
        self.servers: dict[str, TestServer] = {}

    async def serve(self, replica_id: str) -> str:
        app = web.Application()
        app[SERVED] = {}
        app.router.add_post("/v2/models/{model}/infer", _replica_infer)
        app.router.add_post("/v2/models/{model}/versions/{version}/infer", _replica_infer)
        app.router.add_get("/v2/models/{model}/stats", _replica_stats)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        self.servers[replica_id] = server
        return str(server.make_url("")).rstrip("/")

    async def die(self, replica_id: str) -> None:
        await self.servers[replica_id].close()
        self.lose(replica_id, "killed by the test")

    async def stop_replica(self, replica_id: str, *, timeout_s: float) -> None:
        await super().stop_replica(replica_id, timeout_s=timeout_s)
        await self.servers[replica_id].close()

    async def close(self) -> None:
        await super().close()
        for server in self.servers.values():
            await server.close()


@pytest.fixture
async def up(
    tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[str, ReplicaServers, web.Application]]:
    """The activator over `ReplicaServers`; its activation deadline is `WAKE_DEADLINE_S`, or
    the test's own (`@pytest.mark.parametrize("up", [seconds], indirect=True)`)."""
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "2").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text(CONFIG.format(name="m"))
    config = ActivatorConfig(
        model_control=True,
        load_models=("*",),  # every model servable at zero (explicit mode: loaded)
        repository=tmp_path,
        build_images=False,
        defaults=ScaleSettings(
            activation_timeout_s=getattr(request, "param", WAKE_DEADLINE_S), max_replicas=2
        ),
    )
    backend = ReplicaServers()
    app = build_app(config, backend=backend)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/"), backend, app
    await server.close()


async def _infer(s: aiohttp.ClientSession, url: str, n: int, path: str = "") -> None:
    for _ in range(n):
        async with s.post(f"{url}/v2/models/m{path}/infer", json={"inputs": []}) as r:
            assert r.status == 200


async def _stats(s: aiohttp.ClientSession, url: str, path: str = "") -> list[dict[str, Any]]:
    async with s.get(f"{url}/v2/models/m{path}/stats") as r:
        assert r.status == 200
        rows: list[dict[str, Any]] = (await r.json())["model_stats"]
        return rows


def _count(rows: list[dict[str, Any]], version: str = "2") -> int:
    (row,) = [r for r in rows if r["version"] == version]
    assert row["inference_stats"]["success"]["count"] == row["inference_count"]
    return int(row["inference_count"])


async def test_counts_survive_scale_to_zero_and_add_up_across_replicas(
    up: tuple[str, ReplicaServers, web.Application],
) -> None:
    url, backend, app = up
    async with aiohttp.ClientSession() as s:
        assert _count(await _stats(s, url)) == 0  # never served: zeros, nothing woken
        assert backend.starts == 0
        await _infer(s, url, 3)
        await _infer(s, url, 2, "/versions/1")
        assert _count(await _stats(s, url)) == 3
        await _infer(s, url, 1)  # unseen by any read: the final read on retire catches it
        await app[FLEET].endpoint("m").scale_to_zero()  # drained and stopped, still loaded
        rows = await _stats(s, url)
        assert (_count(rows), _count(rows, "1")) == (4, 2)
        assert rows[1]["last_inference"] == 4000
        assert rows[1]["batch_stats"] == [
            {"batch_size": 1, "compute_infer": {"count": 4, "ns": 12}}
        ]
        assert rows[1]["memory_usage"] == []  # no replica holds memory now
        await _infer(s, url, 4)  # wakes a fresh replica, counting from zero
        assert backend.starts == 2
        rows = await _stats(s, url)
        assert (_count(rows), _count(rows, "1")) == (8, 2)
        assert rows[1]["memory_usage"] == [{"type": "CPU", "id": 0, "byte_size": 64}]
        (one,) = await _stats(s, url, "/versions/1")
        assert one["version"] == "1" and one["inference_count"] == 2
        async with s.get(f"{url}/v2/models/stats") as r:
            every = (await r.json())["model_stats"]
        assert [(x["name"], x["version"], x["inference_count"]) for x in every] == [
            ("m", "1", 2),
            ("m", "2", 8),
        ]


async def test_a_replica_that_dies_keeps_the_counts_last_seen(
    up: tuple[str, ReplicaServers, web.Application],
) -> None:
    url, backend, app = up
    async with aiohttp.ClientSession() as s:
        await _infer(s, url, 5)
        assert _count(await _stats(s, url)) == 5  # a dashboard saw 5
        endpoint = app[FLEET].endpoint("m")
        (replica,) = endpoint.replicas
        await backend.die(replica.id)
        await eventually(lambda: replica not in endpoint.replicas)
        assert _count(await _stats(s, url)) == 5
        await _infer(s, url, 1)
        assert _count(await _stats(s, url)) == 6


@pytest.mark.parametrize("up", [0.5], indirect=True)  # the wake that never finishes: 504 soon
async def test_requests_the_activator_failed_are_not_inference_failures(
    up: tuple[str, ReplicaServers, web.Application],
) -> None:
    url, backend, app = up
    async with aiohttp.ClientSession() as s:
        await _infer(s, url, 2)
        await app[FLEET].endpoint("m").scale_to_zero()
        backend.gate.clear()  # the next wake-up never finishes: 504 at the activation timeout
        async with s.post(f"{url}/v2/models/m/infer", json={"inputs": []}) as r:
            assert r.status == 504
        rows = await _stats(s, url)
    (row,) = [r for r in rows if r["version"] == "2"]
    assert row["inference_count"] == 2
    assert row["inference_stats"]["fail"] == {"count": 0, "ns": 0}


async def test_the_stats_of_a_version_not_served_say_so_in_tritons_words(
    up: tuple[str, ReplicaServers, web.Application],
) -> None:
    # As thaw serve's (qa/L0_server_status): Triton's words, Thaw's 404, nothing woken.
    url, backend, _ = up
    async with aiohttp.ClientSession() as s, s.get(f"{url}/v2/models/m/versions/9/stats") as r:
        assert r.status == 404
        assert await r.json() == {"error": "requested model version is not available for model 'm'"}
    assert backend.starts == 0
