"""`thaw prefetch`: the cache DaemonSet's pass pulls hot models' images (thaw.hot, from the
chart's models ConfigMap or config.pbtxt) into the node cache, and only theirs; a failed pull
is reported and fails a `--once` pass."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.kube_fleet import build_image
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.up_process import with_params

pytestmark = pytest.mark.integration


def _prefetch(
    repo: Path, store: Path, cache: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "thaw.cli", "prefetch", str(repo), "--store", str(store)]
    argv += ["--cache", str(cache), "--once", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def test_hot_models_images_land_in_the_node_cache_and_only_theirs(tmp_path: Path) -> None:
    repo, store, cache = tmp_path / "repo", tmp_path / "store", tmp_path / "cache"
    make_onnx_add(repo, "hot_by_settings")
    with_params(make_onnx_add(repo, "hot_by_config"), hot="true")
    make_onnx_add(repo, "cold")
    for name in ("hot_by_settings", "hot_by_config", "cold"):
        build_image(repo / name, store)
    settings = tmp_path / "models.json"
    settings.write_text(json.dumps({"models": {"hot_by_settings": {"thaw.hot": "true"}}}))
    done = _prefetch(repo, store, cache, "--model-settings", str(settings))
    assert done.returncode == 0, done.stderr
    present = {p.parts[-4] for p in cache.glob("images/*/*/*/manifest.json")}
    assert present == {"hot_by_settings", "hot_by_config"}
    assert "2 hot models, 0 failed" in done.stderr


def test_a_failed_pull_is_reported_and_fails_the_pass(tmp_path: Path) -> None:
    repo, store, cache = tmp_path / "repo", tmp_path / "store", tmp_path / "cache"
    with_params(make_onnx_add(repo, "no_image"), hot="true")
    store.mkdir()
    done = _prefetch(repo, store, cache)
    assert done.returncode == 1
    assert "model=no_image image pull failed" in done.stderr
    bad = _prefetch(repo, store, cache, "--interval-s", "0")
    assert bad.returncode == 2 and "`--interval-s` = 0, must be in [1, 86400]" in bad.stderr
