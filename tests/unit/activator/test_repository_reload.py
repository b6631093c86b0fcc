"""`thaw up`'s repository load re-reads the model (activator.fleet.reload), in front of a fake
scaler backend and a tiny upstream replica: a model dropped in after the start, a new version
directory, a broken config that leaves the old one serving, and the poll."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client import generate_latest

from activator.config import ActivatorConfig
from activator.errors import UnknownModel
from activator.fleet.fleet import Fleet
from activator.fleet.reload import Reloader
from activator.surfaces.app import FLEET, build_app
from tests.fakes.scaler_backend import FakeScalerBackend
from tests.fakes.upstream import model_dir, start_upstream
from tests.fixtures.config_only_models import ENSEMBLE_CONFIG, STEP_CONFIG, write_model


@pytest.fixture
async def up(tmp_path: Path) -> AsyncIterator[tuple[str, FakeScalerBackend, Fleet, Path]]:
    upstream = await start_upstream()
    model_dir(tmp_path, "m", 1)
    config = ActivatorConfig(
        model_control=True, load_models=("*",), repository=tmp_path, build_images=False
    )
    backend = FakeScalerBackend(
        url=str(upstream.make_url("")).rstrip("/"), open_gate=True, claim_s=0.0, restore_s=0.01
    )
    app = build_app(config, backend=backend)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/"), backend, app[FLEET], tmp_path
    await server.close()
    await upstream.close()


async def _post(url: str, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(f"{url}{path}") as r:
        text = await r.text()
        return r.status, (await r.json()) if text else None


async def _index(url: str) -> list[tuple[str, str | None, str]]:
    _, rows = await _post(url, "/v2/repository/index")
    return [(r["name"], r.get("version"), r["state"]) for r in rows]


async def test_a_model_dropped_in_after_the_start_is_served_once_loaded(up: Any) -> None:
    url, backend, _, repo = up
    model_dir(repo, "late", 1)
    async with aiohttp.ClientSession() as s, s.get(f"{url}/v2/models/late") as r:
        assert r.status == 404  # not read until a load (explicit mode)
    assert await _post(url, "/v2/repository/models/late/load") == (200, None)
    assert backend.starts == 1
    assert await _index(url) == [("late", "1", "READY"), ("m", "1", "READY")]
    async with aiohttp.ClientSession() as s, s.post(f"{url}/v2/models/late/infer", data=b"x") as r:
        assert r.status == 200
    async with aiohttp.ClientSession() as s, s.get(f"{url}/v2/models/late") as r:
        assert (await r.json())["versions"] == ["1"]


async def test_a_new_version_is_loaded_in_place_and_an_unchanged_model_is_loaded_again(
    up: Any,
) -> None:
    url, backend, fleet, repo = up
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    # unchanged: loaded again, as Triton's explicit load (a new replica: `initialize` again)
    assert (backend.starts, backend.stopped) == (2, ["m-1"])
    model_dir(repo, "m", 2)
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    # The replica was sent the load: it loads the new version in place (Triton's reload).
    assert (backend.starts, backend.stopped) == (2, ["m-1"])
    assert fleet.repository.get("m").versions == ("2",)  # the latest policy: newest only
    # version 1 keeps its row, "unloaded", as in Triton 2.51's index
    assert await _index(url) == [("m", "1", "UNAVAILABLE"), ("m", "2", "READY")]
    _own_file(repo, "m")  # every version imports it: a replica of the new files replaces it
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    assert (backend.starts, backend.stopped) == (3, ["m-1", "m-2"])


def _own_file(repo: Path, name: str) -> None:
    """A file of the model's own beside its versions (activator.fleet.in_place: replaced)."""
    (repo / name / "util.py").write_text(f"# {time.monotonic_ns()}\n")


async def test_a_broken_config_is_refused_and_the_old_version_keeps_serving(up: Any) -> None:
    url, backend, fleet, repo = up
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    (repo / "m" / "config.pbtxt").write_text('name: "m"\nmax_batch_size: -3\n')
    status, body = await _post(url, "/v2/repository/models/m/load")
    assert status == 400
    assert body["error"].startswith("load failed for model 'm': ")
    assert backend.stopped == []  # the old replica still serves
    assert fleet.repository.get("m").versions == ("1",)
    async with aiohttp.ClientSession() as s, s.post(f"{url}/v2/models/m/infer", data=b"x") as r:
        assert r.status == 200
    # Fixed: the next load serves the new files (the old config again: kept in place).
    model_dir(repo, "m", 1)
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    assert backend.stopped == []


async def test_a_broken_new_model_is_unavailable_with_its_reason(up: Any) -> None:
    url, _, _, repo = up
    (repo / "bad").mkdir()
    (repo / "bad" / "config.pbtxt").write_text("this is not a config")
    status, body = await _post(url, "/v2/repository/models/bad/load")
    assert status == 400
    assert body["error"].startswith("load failed for model 'bad': ")
    assert ("bad", None, "UNAVAILABLE") in await _index(url)


async def test_a_load_of_no_such_model_is_refused_in_thaw_serves_words(up: Any) -> None:
    url, _, _, _ = up
    status, body = await _post(url, "/v2/repository/models/nothere/load")
    assert status == 404
    assert body["error"] == (
        "failed to load 'nothere', failed to poll from model repository: no such model in the "
        "repository"
    )
    status, _ = await _post(url, "/v2/repository/models/..%2Fetc/load")
    assert status in (400, 404)


async def test_the_poll_adds_changes_and_removes_models(up: Any) -> None:
    url, backend, fleet, repo = up
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    model_dir(repo, "late", 1)
    _own_file(repo, "m")
    model_dir(repo, "m", 2)
    await fleet.reloader.poll()
    assert await _index(url) == [
        ("late", "1", "READY"), ("m", "1", "UNAVAILABLE"), ("m", "2", "READY")
    ]  # fmt: skip
    assert backend.stopped == ["m-1"]  # replaced; the next request wakes the new files
    assert backend.starts == 1  # the added model is at zero
    for path in sorted((repo / "late").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (repo / "late").rmdir()
    await fleet.reloader.poll()
    assert await _index(url) == [("m", "1", "UNAVAILABLE"), ("m", "2", "READY")]
    async with aiohttp.ClientSession() as s, s.post(f"{url}/v2/models/late/infer", data=b"x") as r:
        assert r.status == 404


async def test_the_poll_refuses_a_broken_change_once(up: Any, caplog: Any) -> None:
    _, _, fleet, repo = up
    config = repo / "m" / "config.pbtxt"
    config.write_text('name: "m"\nmax_batch_size: -3\n')
    await fleet.reloader.poll()
    await fleet.reloader.poll()
    refusals = [r for r in caplog.records if "not reloaded" in r.getMessage()]
    assert len(refusals) == 1
    assert fleet.repository.get("m").versions == ("1",)
    os.utime(config, ns=(1, 1))  # touched again: read again
    await fleet.reloader.poll()
    assert len([r for r in caplog.records if "not reloaded" in r.getMessage()]) == 2


async def test_the_poll_adds_an_ensemble_and_its_step_model_together(up: Any) -> None:
    url, _, fleet, repo = up
    write_model(repo, "a_pipeline", ENSEMBLE_CONFIG.format(name="a_pipeline", step="z_step"))
    write_model(repo, "z_step", STEP_CONFIG.format(name="z_step"))
    await fleet.reloader.poll()  # the ensemble sorts first by name: still served
    names = [name for name, _, state in await _index(url) if state == "READY"]
    assert names == ["a_pipeline", "m", "z_step"]
    assert fleet.models["a_pipeline"].composing == ("z_step",)


async def test_a_load_of_an_ensemble_whose_step_is_missing_is_refused(up: Any) -> None:
    url, _, _, repo = up
    write_model(repo, "pipeline", ENSEMBLE_CONFIG.format(name="pipeline", step="absent"))
    status, body = await _post(url, "/v2/repository/models/pipeline/load")
    assert status == 400
    assert "depends on 'absent' which is not in the model repository" in body["error"]


async def test_a_bad_thaw_setting_on_load_is_refused_not_fatal(up: Any) -> None:
    url, _, fleet, repo = up
    model_dir(repo, "late", 1)
    config = repo / "late" / "config.pbtxt"
    setting = 'parameters { key: "thaw.max_replicas" value { string_value: "-1" } }\n'
    config.write_text(config.read_text() + setting)
    status, body = await _post(url, "/v2/repository/models/late/load")
    assert status == 400
    assert body["error"].startswith("load failed for model 'late': `thaw.max_replicas`")
    assert not fleet.served("late")


async def test_a_request_in_flight_finishes_while_its_replica_is_replaced(up: Any) -> None:
    url, backend, _, repo = up
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    async with aiohttp.ClientSession() as s:
        slow = asyncio.create_task(
            s.post(f"{url}/v2/models/m/infer", data=b"in flight", headers={"X-Behave": "slow"})
        )
        await asyncio.sleep(0.1)  # on its way to the replica
        _own_file(repo, "m")  # a change its replica cannot take in place
        assert await _post(url, "/v2/repository/models/m/load") == (200, None)
        async with await slow as r:
            assert r.status == 200
            assert await r.read() == b"in flight"
    assert (backend.starts, backend.stopped) == (2, ["m-1"])


async def test_a_replica_still_starting_on_the_old_files_is_stopped_unused(up: Any) -> None:
    url, backend, _, repo = up
    backend.gate.clear()  # the first start hangs: it has read the old files
    async with aiohttp.ClientSession() as s:
        first = asyncio.create_task(s.post(f"{url}/v2/models/m/infer", data=b"first"))
        await asyncio.wait_for(backend.start_called.wait(), 5)
        model_dir(repo, "m", 2)
        load = asyncio.create_task(_post(url, "/v2/repository/models/m/load"))
        await asyncio.sleep(0.2)  # the load has re-read the model and is waiting
        backend.gate.set()
        assert await load == (200, None)
        async with await first as r:
            assert r.status == 200  # served, by a replica of the new files
    assert backend.stopped == ["m-1"]  # stopped as it came up, never routed to
    assert backend.starts == 2


async def test_changed_thaw_settings_wait_for_the_next_start(up: Any, caplog: Any) -> None:
    url, _, fleet, repo = up
    before = fleet.endpoint("m").settings
    config = repo / "m" / "config.pbtxt"
    setting = 'parameters { key: "thaw.max_replicas" value { string_value: "1" } }\n'
    config.write_text(config.read_text() + setting)
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    # What is in effect is what the entry says: the settings the endpoint was made with.
    assert fleet.repository.get("m").settings == before == fleet.endpoint("m").settings
    assert "settings take effect at the next start" in caplog.text


async def test_a_load_of_a_removed_model_drops_it(up: Any) -> None:
    url, backend, fleet, repo = up
    assert await _post(url, "/v2/repository/models/m/load") == (200, None)
    for path in sorted((repo / "m").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (repo / "m").rmdir()
    status, body = await _post(url, "/v2/repository/models/m/load")
    assert (status, body["error"]) == (
        404,
        "failed to load 'm', failed to poll from model repository: no such model in the repository",
    )
    assert await _index(url) == []
    assert backend.stopped == ["m-1"]  # drained
    assert 'thaw_model_state{model="m"' not in generate_latest(fleet.metrics.registry).decode()


async def test_without_rereads_a_load_only_warms_the_index_read_at_start(up: Any) -> None:
    _, backend, fleet, repo = up
    reloader = Reloader(fleet, rereads=False)  # as with --scaler kubernetes
    model_dir(repo, "late", 1)
    with pytest.raises(UnknownModel):
        await reloader.load("late")
    model_dir(repo, "m", 2)
    await reloader.load("m")
    assert fleet.repository.get("m").versions == ("1",)
    assert (backend.starts, backend.stopped) == (1, [])


async def test_a_repository_gone_is_no_removal_of_its_models(up: Any, tmp_path: Path) -> None:
    _, _, fleet, repo = up
    moved = tmp_path.parent / f"{tmp_path.name}-unmounted"
    repo.rename(moved)
    try:
        with pytest.raises(OSError, match="is not a directory"):
            await fleet.reloader.poll()
        assert fleet.served("m")
    finally:
        moved.rename(repo)
