"""Restores into VRAM: bytes, a wake from the host tier, the VRAM budget, the warm-up's pool."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from runtime.config import ServeConfig
from runtime.observe.metrics import Metrics
from runtime.process.cuda_warmup import CudaWarmup
from snapshotter import DeviceConfig, DeviceMemoryError, ImageLoader, ImageRef, build_image
from snapshotter.stores.dir_store import DirStore
from tests.fixtures.torch_models import make_torchscript_linear

REF = ImageRef("torch_linear", "1", "cpu")


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    model = make_torchscript_linear(tmp_path / "repo", features=256)
    build_image(model / "1", DirStore(tmp_path / "cache"), max_chunk_bytes=64 << 10)
    return tmp_path / "cache"


def test_vram_views_equal_a_host_restore_and_a_wake_from_the_host_tier(
    cache: Path, tmp_path: Path
) -> None:
    host = ImageLoader(None, cache, "cpu").restore(REF).torch_tensors()

    def loader() -> ImageLoader:
        return ImageLoader(
            None, cache, "cpu", host_cache_dir=tmp_path / "tier", host_max_bytes=1 << 30
        )

    first = loader().restore(REF, device="cuda:0")
    loader().keep_in_host_tier(REF)  # what the restore also does in the background
    assert loader().host.entries()
    second = loader().restore(REF, device="cuda:0")  # maps the tier's file
    assert (first.source, second.source) == ("cache", "host")
    for name, tensor in host.items():
        assert second.torch_tensors()[name].is_cuda
        assert torch.equal(second.torch_tensors()[name].cpu(), tensor), name


def test_the_vram_budget_refuses_an_image_that_cannot_fit(cache: Path) -> None:
    free, _ = torch.cuda.mem_get_info(0)
    loader = ImageLoader(None, cache, "cpu", device=DeviceConfig(headroom_bytes=free * 2))
    with pytest.raises(DeviceMemoryError, match="not enough free device memory"):
        loader.restore(REF, device="cuda:0")


def test_warm_up_reserves_the_pool_and_pins_the_staging_ring() -> None:
    metrics = Metrics()
    config = ServeConfig(
        repository=Path("."),
        cuda_memory_pools=((0, 512 << 20),),
        pinned_memory_pool_bytes=128 << 20,
    )
    warmup = CudaWarmup(config, metrics=metrics, arena=None)
    warmup.run()
    assert warmup.ready and warmup.staging is not None and warmup.staging.allocated
    assert torch.cuda.memory_reserved(0) >= 512 << 20
    assert 'thaw_cuda_memory_pool_bytes{gpu="0"} 536870912\n' in metrics.exposition().decode()
