"""The repository index lists the repository's models, on `thaw serve` and through `thaw up`,
as Triton 2.51 does (docs/triton-http-parity.md, "A twelfth side by side"): a model whose
directory is removed has no row once it no longer serves (unloaded in explicit mode, or by a
poll), a load of it is refused in Triton's words, and its row comes back with its directory.
A model served from a load's `file:` overrides is listed while it serves (Triton leaves it
out: Thaw's index shows what serves)."""

from __future__ import annotations

import base64
import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.either_server import TARGETS, Started, start_either
from tests.fixtures.models import IDENTITY_PY, make_python_identity

pytestmark = pytest.mark.integration

_CONFIG = {
    "backend": "python",
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
}


def _call(url: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    method = "GET" if body is None else "POST"
    request = urllib.request.Request(url + path, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _index(url: str) -> dict[str, list[tuple[str, str]]]:
    status, rows = _call(url, "/v2/repository/index", {})
    assert status == 200, rows
    index: dict[str, list[tuple[str, str]]] = {}
    for row in rows:
        index.setdefault(row["name"], []).append((row.get("version", ""), row.get("state", "")))
    return index


def _repo(root: Path) -> Path:
    repo = root / "repo"
    for name in ("kept", "gone", "gone_later"):
        make_python_identity(repo, name)
    return repo


@pytest.fixture(params=TARGETS)
def explicit(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Started, Path]]:
    repo = _repo(tmp_path)
    server = start_either(
        request.param, repo, "--model-control-mode", "explicit", "--load-model", "*"
    )
    try:
        yield server, repo
    finally:
        server.stop()


def test_a_removed_model_leaves_the_index_once_unloaded(explicit: tuple[Started, Path]) -> None:
    server, repo = explicit
    assert set(_index(server.url)) == {"kept", "gone", "gone_later"}
    shutil.rmtree(repo / "gone")
    assert _index(server.url)["gone"] == [("1", "READY")]  # it still serves: listed
    assert _call(server.url, "/v2/repository/models/gone/unload", {})[0] == 200
    assert _call(server.url, "/v2/repository/models/gone_later/unload", {})[0] == 200
    index = _index(server.url)
    assert "gone" not in index
    assert index["gone_later"] == [("1", "UNAVAILABLE")]  # unloaded, its directory there
    status, body = _call(server.url, "/v2/repository/models/gone/load", {})
    assert (status, body["error"]) == (
        404,
        "failed to load 'gone', failed to poll from model repository: no such model in the "
        "repository",
    )
    assert "gone" not in _index(server.url)


def test_a_model_loaded_from_files_is_listed_while_it_serves(
    explicit: tuple[Started, Path],
) -> None:
    server, _ = explicit
    files = {"file:1/model.py": base64.b64encode(IDENTITY_PY.encode()).decode()}
    params = {"config": json.dumps(_CONFIG), **files}
    assert _call(server.url, "/v2/repository/models/fresh/load", {"parameters": params})[0] == 200
    assert _index(server.url)["fresh"] == [("1", "READY")]
    assert _call(server.url, "/v2/repository/models/fresh/unload", {})[0] == 200
    assert "fresh" not in _index(server.url)


@pytest.mark.parametrize("target", TARGETS)
def test_a_poll_drops_a_removed_models_row(target: str, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    server = start_either(
        target, repo, "--model-control-mode", "poll", "--repository-poll-secs", "1"
    )
    try:
        assert set(_index(server.url)) == {"kept", "gone", "gone_later"}
        shutil.rmtree(repo / "gone")
        deadline = time.monotonic() + 60
        while "gone" in _index(server.url) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert set(_index(server.url)) == {"kept", "gone_later"}
        assert _call(server.url, "/v2/models/gone/infer", {"inputs": []})[0] == 404
    finally:
        server.stop()
