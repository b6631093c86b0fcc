"""`thaw up`'s load of a model whose instance groups alone changed (activator.fleet.in_place),
in front of a fake scaler backend and a tiny upstream replica: each replica up is sent the load
and keeps serving (none replaced), the new config is what `thaw up` answers; every replica
refusing it keeps the old config and refuses the load; any other change still replaces."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from activator.config import ActivatorConfig
from activator.fleet.fleet import Fleet
from activator.surfaces.app import FLEET, build_app
from tests.fakes.scaler_backend import FakeScalerBackend
from tests.fakes.upstream import LOAD_REFUSAL, LOADS, MODEL_CONFIG, model_dir, start_upstream


@pytest.fixture
async def up(
    tmp_path: Path,
) -> AsyncIterator[tuple[str, FakeScalerBackend, TestServer, Path, Fleet]]:
    upstream = await start_upstream()
    model_dir(tmp_path, "m", 1)
    _instances(tmp_path, 1)
    config = ActivatorConfig(model_control=True, repository=tmp_path, build_images=False)
    backend = FakeScalerBackend(
        url=str(upstream.make_url("")).rstrip("/"), open_gate=True, claim_s=0.0, restore_s=0.01
    )
    app = build_app(config, backend=backend)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/"), backend, upstream, tmp_path, app[FLEET]
    await server.close()
    await upstream.close()


def _instances(repo: Path, count: int, extra: str = "") -> None:
    """m's config with `count` CPU instances (its mtime moved on: a change, whatever the size)."""
    path = repo / "m" / "config.pbtxt"
    before = path.stat().st_mtime_ns if path.exists() else 0
    group = f"instance_group [ {{ count: {count} kind: KIND_CPU }} ]\n"
    path.write_text(MODEL_CONFIG.format(name="m") + group + extra)
    os.utime(path, ns=(before + 10**9, before + 10**9))


async def _post(url: str, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(f"{url}{path}") as r:
        text = await r.text()
        return r.status, (await r.json()) if text else None


async def _count(url: str) -> int:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/v2/models/m/config") as r:
        return int((await r.json())["instance_group"][0]["count"])


async def test_an_instance_count_change_is_sent_to_the_replica_which_keeps_serving(
    up: Any,
) -> None:
    url, backend, upstream, repo, _ = up
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)  # warm: m-1
    _instances(repo, 3)
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    assert upstream.app[LOADS] == ["m"]  # the running replica took it in place
    assert (backend.starts, backend.stopped) == (1, [])
    assert await _count(url) == 3
    async with aiohttp.ClientSession() as s, s.post(f"{url}/v2/models/m/infer", data=b"x") as r:
        assert r.status == 200


async def test_at_zero_the_new_entry_is_all_and_the_next_wake_reads_it(up: Any) -> None:
    url, backend, upstream, repo, _ = up
    _instances(repo, 2)
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    assert upstream.app[LOADS] == []  # no replica was up: nothing to update
    assert (backend.starts, backend.stopped) == (1, [])  # the load's wake
    assert await _count(url) == 2


async def test_every_replica_refusing_it_keeps_the_old_config_and_refuses_the_load(
    up: Any,
) -> None:
    url, backend, upstream, repo, _ = up
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    refusal = 'Resource count for "R1" is limited to 10 which will prevent scheduling'
    upstream.app[LOAD_REFUSAL].append(f"load failed for model 'm': {refusal}")
    _instances(repo, 4)
    status, body = await _post(url, "/v2/repository/models/m/load")
    assert (status, body["error"]) == (400, f"load failed for model 'm': {refusal}")
    assert backend.stopped == []  # the old instances serve on, as Triton's failed reload
    assert await _count(url) == 1
    upstream.app[LOAD_REFUSAL].clear()
    _instances(repo, 2)  # corrected: taken in place
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    assert (upstream.app[LOADS], backend.stopped) == (["m", "m"], [])
    assert await _count(url) == 2


async def test_a_change_beyond_the_instance_groups_replaces_the_replicas(up: Any) -> None:
    url, backend, upstream, repo, _ = up
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    _instances(repo, 2, 'parameters { key: "note" value { string_value: "x" } }\n')
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    assert upstream.app[LOADS] == []
    assert (backend.starts, backend.stopped) == (2, ["m-1"])


async def test_the_poll_updates_instances_in_place_too(up: Any) -> None:
    url, backend, upstream, repo, fleet = up
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    _instances(repo, 5)
    await fleet.reloader.poll()
    assert (upstream.app[LOADS], backend.starts, backend.stopped) == (["m"], 1, [])
    assert await _count(url) == 5


async def test_a_config_override_changing_only_the_instances_is_taken_in_place(up: Any) -> None:
    url, backend, upstream, _, _ = up
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    async with aiohttp.ClientSession() as s, s.get(f"{url}/v2/models/m/config") as r:
        config = await r.json()
    config["instance_group"][0]["count"] = 2
    body = {"parameters": {"config": json.dumps(config)}}
    load = f"{url}/v2/repository/models/m/load"
    async with aiohttp.ClientSession() as s, s.post(load, json=body) as r:
        assert r.status == 200, await r.text()
    assert (upstream.app[LOADS], backend.starts, backend.stopped) == (["m"], 1, [])
    assert await _count(url) == 2
