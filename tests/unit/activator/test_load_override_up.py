"""`thaw up`'s repository load with Triton's overrides (activator.fleet.reload): a `config`
alone, a `config` with `file:` model files, in front of a fake scaler backend that records each
replica's load parameters and a tiny upstream replica; a plain load keeping a `config`
override while the files are unchanged, an unload forgetting it, and refusals in Triton's
words with the old model still serving."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from activator.config import ActivatorConfig
from activator.errors import NotSupported
from activator.fleet.fleet import Fleet
from activator.fleet.reload import Reloader
from activator.surfaces.app import FLEET, build_app
from tests.fakes.scaler_backend import FakeScalerBackend
from tests.fakes.upstream import model_dir, start_upstream
from thawwire.load_overrides import LoadOverride

_IO = {
    "backend": "python",
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
    "parameters": {"thaw.max_held_requests": {"string_value": "4"}},
}


@pytest.fixture
async def up(tmp_path: Path) -> AsyncIterator[tuple[str, FakeScalerBackend, Fleet, Path]]:
    upstream = await start_upstream()
    repo = tmp_path / "repo"
    model_dir(repo, "m", 1, 2)
    config = ActivatorConfig(model_control=True, repository=repo, build_images=False)
    backend = FakeScalerBackend(
        url=str(upstream.make_url("")).rstrip("/"), open_gate=True, claim_s=0.0, restore_s=0.01
    )
    app = build_app(config, backend=backend)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/"), backend, app[FLEET], repo
    await server.close()
    await upstream.close()


async def _load(url: str, name: str, params: dict[str, Any] | None = None) -> tuple[int, Any]:
    body = {"parameters": params} if params is not None else None
    path = f"{url}/v2/repository/models/{name}/load"
    async with aiohttp.ClientSession() as s, s.post(path, json=body) as r:
        text = await r.text()
        return r.status, (json.loads(text) if text else None)


async def _post(url: str, path: str) -> int:
    async with aiohttp.ClientSession() as s, s.post(f"{url}{path}", data=b"x") as r:
        return r.status


async def _config(url: str, name: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/v2/models/{name}/config") as r:
        assert r.status == 200
        doc: dict[str, Any] = await r.json()
        return doc


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_a_config_override_is_served_and_reaches_the_replicas(up: Any) -> None:
    url, backend, fleet, _ = up
    assert await _load(url, "m") == (200, None)
    config = json.dumps({**_IO, "version_policy": {"specific": {"versions": [1]}}})
    assert await _load(url, "m", {"config": config}) == (200, None)
    assert fleet.repository.get("m").versions == ("1",)  # the override's policy
    # Only its version policy differs: the replica up takes the load (with the override) in
    # place, unloading version 2, as Triton's reload (activator.fleet.in_place).
    assert backend.stopped == []
    assert backend.loaded_with == [None]
    assert await _post(url, "/v2/models/m/infer") == 200
    assert (await _config(url, "m"))["version_policy"] == {"specific": {"versions": [1]}}


async def test_a_plain_load_keeps_a_config_override_while_the_files_are_unchanged(
    up: Any,
) -> None:
    url, backend, fleet, repo = up
    config = json.dumps({**_IO, "max_batch_size": 8})
    assert await _load(url, "m", {"config": config}) == (200, None)
    assert await _load(url, "m") == (200, None)  # kept: the same replica, the override's config
    assert (backend.starts, backend.stopped) == (1, [])
    assert fleet.repository.get("m").config.max_batch_size == 8
    os.utime(repo / "m" / "config.pbtxt", ns=(1, 1))  # touched: the repository's again
    assert await _load(url, "m") == (200, None)
    assert fleet.repository.get("m").config.max_batch_size == 0
    assert backend.stopped == ["m-1"]
    assert backend.loaded_with == [{"config": config}, None]


async def test_an_unload_forgets_the_override(up: Any) -> None:
    url, backend, fleet, _ = up
    config = json.dumps({**_IO, "max_batch_size": 8})
    assert await _load(url, "m", {"config": config}) == (200, None)
    async with aiohttp.ClientSession() as s, s.post(f"{url}/v2/repository/models/m/unload") as r:
        assert r.status == 200
    assert await _load(url, "m") == (200, None)
    assert fleet.repository.get("m").config.max_batch_size == 0
    assert backend.loaded_with[-1] is None


async def test_file_overrides_are_the_models_whole_directory(up: Any) -> None:
    url, backend, fleet, repo = up
    files = {"file:3/model.py": _b64(b"# the override's model\n")}
    params = {"config": json.dumps(_IO), **files}
    assert await _load(url, "m", params) == (200, None)
    entry = fleet.repository.get("m")
    assert entry.versions == ("3",)  # versions 1 and 2 are not in the override
    assert (entry.directory / "3" / "model.py").read_bytes() == b"# the override's model\n"
    assert not entry.directory.is_relative_to(repo)
    assert backend.loaded_with[-1] == params
    assert await _post(url, "/v2/models/m/infer") == 200
    # A new model, by a name no repository has, from its files alone.
    assert await _load(url, "other", params) == (200, None)
    assert fleet.repository.get("other").versions == ("3",)
    # A plain load reads the repository's files again, and the override's go.
    written = entry.directory
    assert await _load(url, "m") == (200, None)
    assert fleet.repository.get("m").versions == ("2",)
    assert not written.exists()
    await fleet.close()
    assert not fleet.repository.get("other").directory.exists()  # thaw up's files are gone


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"file:1/model.py": _b64(b"x")}, "must also carry 'config'"),
        ({"config": "{not json"}, "parameter 'config' is not valid JSON"),
        ({"config": "[1]"}, "parameter 'config' must hold a JSON object"),
        ({"config": "{}", "file:1/model.py": "%%%"}, "is not valid base64"),
        ({"config": "{}", "file:../../escape.py": _b64(b"x")}, "without '..'"),
        ({"config": "{}", "file:/etc/passwd": _b64(b"x")}, "without '..'"),
        ({"config": "{}", "file:1/./a": _b64(b"x")}, "without '..'"),
    ],
)
async def test_a_bad_override_is_refused_and_the_old_model_keeps_serving(
    up: Any, params: dict[str, Any], words: str
) -> None:
    url, backend, fleet, _ = up
    assert await _load(url, "m") == (200, None)
    status, body = await _load(url, "m", params)
    assert status == 400
    assert body["error"].startswith("failed to load 'm', ")
    assert words in body["error"]
    assert (backend.starts, backend.stopped) == (1, [])
    assert fleet.repository.get("m").versions == ("2",)
    assert await _post(url, "/v2/models/m/infer") == 200


async def test_a_config_override_a_replica_would_refuse_is_refused_as_a_failed_load(
    up: Any,
) -> None:
    url, backend, fleet, _ = up
    assert await _load(url, "m") == (200, None)
    status, body = await _load(url, "m", {"config": json.dumps({**_IO, "max_batch_size": -3})})
    assert status == 400
    assert body["error"].startswith("load failed for model 'm': ")
    assert (backend.starts, backend.stopped) == (1, [])
    assert await _post(url, "/v2/models/m/infer") == 200
    # A refused override of files leaves none of them written.
    bad = {"config": json.dumps({**_IO, "max_batch_size": -3}), "file:1/model.py": _b64(b"x")}
    assert (await _load(url, "m", bad))[0] == 400
    root = fleet.reloader.override_root
    assert root is not None and not any(root.iterdir())


async def test_an_override_its_replica_refuses_rolls_back_to_what_served(up: Any) -> None:
    url, backend, fleet, _ = up
    config = json.dumps({**_IO, "max_batch_size": 8})
    assert await _load(url, "m") == (200, None)
    # Replicas refuse the override's file.
    backend.refuse_parameter["file:5/model.py"] = "initialize() failed: TypeError"
    files = {"file:5/model.py": _b64(b"# broken\n")}
    status, body = await _load(url, "m", {"config": json.dumps(_IO), **files})
    assert status == 400
    assert body["error"].startswith("load failed for model 'm': ")
    assert "initialize() failed" in body["error"]
    assert fleet.endpoint("m").ready_count == 1  # the repository's model, warm again
    assert await _load(url, "m", {"config": config}) == (200, None)
    status, body = await _load(url, "m", {"config": json.dumps(_IO), **files})
    assert status == 400
    async with aiohttp.ClientSession() as s, s.get(f"{url}/v2/models/m/ready") as r:
        assert r.status == 200  # the refused override's error is not the old model's
    entry = fleet.repository.get("m")
    assert (entry.versions, entry.config.max_batch_size) == (("2",), 8)  # the config override
    assert await _post(url, "/v2/models/m/infer") == 200
    assert backend.loaded_with[-1] == {"config": config}  # the old override, warm again
    root = fleet.reloader.override_root
    assert root is not None and not any(root.iterdir())  # the refused files are gone
    assert await _load(url, "m") == (200, None)  # and the override still holds
    assert fleet.repository.get("m").config.max_batch_size == 8


async def test_a_new_model_whose_override_its_replica_refuses_is_not_served(up: Any) -> None:
    url, backend, fleet, _ = up
    backend.fail_with = "initialize() failed"
    files = {"file:1/model.py": _b64(b"# broken\n")}
    status, body = await _load(url, "fresh", {"config": json.dumps(_IO), **files})
    assert status == 400
    assert body["error"].startswith("load failed for model 'fresh': ")
    assert not fleet.served("fresh")
    backend.fail_with = None
    assert await _post(url, "/v2/models/fresh/infer") == 404


async def test_overrides_are_refused_where_activators_would_disagree(up: Any) -> None:
    _, backend, fleet, _ = up
    kubernetes_like = Reloader(fleet, rereads=False)  # `--scaler kubernetes`
    with pytest.raises(NotSupported, match="not supported with --scaler kubernetes"):
        await kubernetes_like.load("m", LoadOverride(json.dumps(_IO)))
    assert backend.starts == 0
