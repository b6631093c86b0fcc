"""`thaw serve` with the shared host-memory tier and a node-cache budget: hits, evictions."""

from __future__ import annotations

import os
import re
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from snapshotter import build_image, open_store
from tests.fixtures.models import make_onnx_add
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration


def _post(url: str) -> None:
    req = urllib.request.Request(url, data=b"{}", method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()


def _metric(server: ServeProcess, name: str) -> float:
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else -1.0


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_reload_maps_the_image_the_host_tier_kept(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    repo = tmp_path / "repo"
    make_onnx_add(repo, size=4096)
    build_image(repo / "onnx_add" / "1", open_store(str(tmp_path / "cache")))
    tier = tmp_path / "tier"
    server = start_serve(
        repo, "--model-control-mode", "explicit", "--cache", str(tmp_path / "cache"),
        "--host-cache", str(tier), "--host-cache-bytes", str(8 << 20),
    )  # fmt: skip
    _post(f"{server.url}/v2/repository/models/onnx_add/load")
    assert _metric(server, 'thaw_host_cache_lookups_total{result="miss"}') == 1
    _wait(lambda: _metric(server, "thaw_host_cache_bytes") > 0, 30, "the image kept")
    _post(f"{server.url}/v2/repository/models/onnx_add/unload")
    _post(f"{server.url}/v2/repository/models/onnx_add/load")
    assert _metric(server, 'thaw_host_cache_lookups_total{result="hit"}') == 1


def test_the_node_cache_budget_evicts_and_counts_it(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    repo = tmp_path / "repo"
    store = open_store(str(tmp_path / "store"))
    for name, size in (("a", 64 << 10), ("b", 65 << 10)):  # ~256 KiB of weights each
        make_onnx_add(repo, name, size=size)
        build_image(repo / name / "1", store)
    server = start_serve(
        repo, "--model-control-mode", "explicit", "--store", str(tmp_path / "store"),
        "--cache", str(tmp_path / "cache"), "--cache-max-bytes", str(400 << 10),
    )  # fmt: skip
    _post(f"{server.url}/v2/repository/models/a/load")
    assert _metric(server, 'thaw_image_cache_evictions_total{tier="node"}') == 0
    # Chunks used in the last minute may be another process's read in progress and are never
    # evicted: make a's last use two minutes old (its verified markers' times).
    old = time.time() - 120
    for marker in (tmp_path / "cache").rglob("*.ok"):
        os.utime(marker, (old, old))
    _post(f"{server.url}/v2/repository/models/b/load")  # b's chunks only fit without a's
    assert _metric(server, 'thaw_image_cache_evictions_total{tier="node"}') >= 1
    assert _metric(server, 'thaw_image_cache_evicted_bytes_total{tier="node"}') >= 256 << 10
