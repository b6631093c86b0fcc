"""CUDA-ready warm processes: the GPU flags, the pool shapes, and the warm-up's CPU fallback."""

from __future__ import annotations

import argparse
import re
import urllib.request
from pathlib import Path

import pytest
import torch

from runtime.config import ConfigError, ServeConfig, parse_cuda_pool
from runtime.devices.target import DeviceTarget, local_target
from runtime.observe.metrics import Metrics
from runtime.process import cli
from runtime.process.cuda_warmup import CudaWarmup, staging_shape
from tests.fixtures.serve_process import ServeProcess


def _parse(*argv: str) -> ServeConfig:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return cli.build_config(parser.parse_args(["serve", *argv]))


def test_gpu_flags_in_tritons_form_become_the_config() -> None:
    config = _parse(
        "repo", "--cuda-memory-pool-byte-size", "0:268435456", "--cuda-memory-pool-byte-size",
        "1:1024", "--pinned-memory-pool-byte-size", "67108864", "--vram-headroom-bytes", "0",
    )  # fmt: skip
    assert config.cuda_memory_pools == ((0, 268435456), (1, 1024))
    assert config.pinned_memory_pool_bytes == 64 << 20 and config.vram_headroom_bytes == 0
    cpu, cuda = local_target("cpu"), DeviceTarget("cuda", (0,), "cuda", "")
    assert cli.wants_cuda_warmup(config, cpu)
    assert not cli.wants_cuda_warmup(_parse("repo"), cpu)
    assert cli.wants_cuda_warmup(_parse("repo", "--target", "cuda"), cuda)
    # `auto` that found a GPU warms CUDA up; one that found none does not.
    auto = _parse("repo", "--target", "auto")
    assert cli.wants_cuda_warmup(auto, DeviceTarget("auto", (0, 1), "cuda", "2 GPU(s)"))
    assert not cli.wants_cuda_warmup(auto, DeviceTarget("auto", (), "cpu", "no CUDA device"))


@pytest.mark.parametrize("text", ["0", "a:1", "0:-5", ":12", "0:1.5"])
def test_a_malformed_pool_names_the_flag(text: str) -> None:
    with pytest.raises(ConfigError, match="must be <gpu>:<bytes>"):
        parse_cuda_pool(text)


def test_one_pool_per_gpu() -> None:
    with pytest.raises(ConfigError, match="each GPU at most once"):
        ServeConfig(repository=Path("."), cuda_memory_pools=((0, 1), (0, 2)))


@pytest.mark.parametrize(
    ("pinned", "shape"),
    [(512 << 20, (32 << 20, 16)), (1 << 30, (32 << 20, 32)), (8 << 20, (4 << 20, 2)), (3, (1, 3))],
)
def test_staging_ring_shape(pinned: int, shape: tuple[int, int]) -> None:
    assert staging_shape(pinned) == shape


def test_warm_up_without_cuda_logs_counts_and_lets_the_server_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    metrics = Metrics()
    config = ServeConfig(
        repository=Path("."), cuda_memory_pools=((0, 1 << 20),), pinned_memory_pool_bytes=1 << 20
    )
    warmup = CudaWarmup(config, metrics=metrics, arena=None)
    assert warmup.staging is not None and not warmup.staging.allocated
    warmup.run()
    assert not warmup.ready and not warmup.staging.allocated
    assert "CUDA warm-up skipped" in caplog.text
    text = metrics.exposition().decode()
    assert 'thaw_device_fallbacks_total{model="",reason="no_cuda"} 1\n' in text


@pytest.mark.integration
def test_thaw_serve_with_gpu_flags_comes_up_cpu_only_on_a_machine_without_cuda(
    tmp_path: Path,
) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    # With a cache and the host tier too: the image loader is made after the warm-up's pool.
    (tmp_path / "repo").mkdir()
    server = ServeProcess(
        tmp_path / "repo", "--model-control-mode", "explicit", "--cuda-memory-pool-byte-size",
        "0:1048576", "--pinned-memory-pool-byte-size", "1048576", "--cache",
        str(tmp_path / "cache"), "--host-cache", str(tmp_path / "tier"), "--host-cache-bytes",
        "1048576",
    )  # fmt: skip
    try:
        server.wait_ready()
        with urllib.request.urlopen(server.url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        fallback = r'^thaw_device_fallbacks_total\{model="",reason="no_cuda"\} 1$'
        assert re.search(fallback, text, re.M)
        assert re.search(r'^thaw_host_cache_lookups_total\{result="miss"\} 0$', text, re.M)
        assert "nv_gpu_utilization" not in text  # no NVML here: the GPU families are absent
        assert "CUDA warm-up skipped" in server.logs()
    finally:
        assert server.stop() == 0
