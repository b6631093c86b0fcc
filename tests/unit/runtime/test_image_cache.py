"""`make_image_loader`: the runtime's one ImageLoader carries every tier and GPU setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.config import ServeConfig
from runtime.errors import ServingError
from runtime.models.image_cache import make_image_loader
from snapshotter import StagingPool


def test_the_loader_gets_the_tiers_the_headroom_and_the_warm_processs_pool(
    tmp_path: Path,
) -> None:
    config = ServeConfig(
        repository=tmp_path, cache=tmp_path / "cache", cache_max_bytes=1 << 30,
        host_cache=tmp_path / "tier", host_cache_bytes=1 << 20, vram_headroom_bytes=12345,
    )  # fmt: skip
    pool = StagingPool(slot_bytes=4096, slots=2)
    loader = make_image_loader(config, staging=pool)
    assert loader.staging is pool  # restores into a GPU copy through the pre-pinned ring
    assert loader.device_config.headroom_bytes == 12345
    assert loader.host.root == tmp_path / "tier" and loader.host.max_bytes == 1 << 20
    assert loader.cache is not None and loader.cache.max_bytes == 1 << 30


def test_without_a_pool_or_a_tier_restores_pin_their_own_ring_and_map_nothing(
    tmp_path: Path,
) -> None:
    loader = make_image_loader(ServeConfig(repository=tmp_path, cache=tmp_path / "cache"))
    assert loader.staging is None and not loader.host.enabled
    assert loader.device_config.headroom_bytes == 512 << 20  # --vram-headroom-bytes' default


def test_a_bad_store_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ServingError, match="cannot open snapshot store"):
        make_image_loader(ServeConfig(repository=tmp_path, store="ftp://nowhere/images"))
