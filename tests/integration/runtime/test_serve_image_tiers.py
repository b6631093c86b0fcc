"""`thaw serve` with the shared host-memory tier and a node-cache budget: hits, evictions."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from snapshotter import build_image, open_store
from tests.fixtures.onnx_models import make_onnx_add
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


def test_the_cache_metrics_are_on_metrics_from_the_start(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    repo = tmp_path / "repo"
    make_onnx_add(repo)
    server = start_serve(
        repo, "--model-control-mode", "explicit", "--cache", str(tmp_path / "cache"),
        "--cache-max-bytes", str(400 << 10),
    )  # fmt: skip
    assert _metric(server, 'thaw_image_cache_evictions_total{tier="node"}') == 0
    assert _metric(server, 'thaw_image_cache_evicted_bytes_total{tier="host"}') == 0
