"""S3 faults the chunk tests in test_snapshot_s3.py leave out: on the manifest's GET, and
throttling past the retry budget. Through the fault proxy in front of the real (moto) S3
server; each test says what the restore does and that nothing is left in the cache."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from s3_images import RANGE_BYTES, publish, s3_store
from snapshot_s3_fakes import BUCKET, FaultProxy

from snapshotter import ImageLoader, ManifestError, SnapshotStoreError, StoreTimeout
from snapshotter.image_ref import ImageRef
from snapshotter.stores.s3_store import S3Config, S3Store

pytestmark = pytest.mark.integration

REF = ImageRef("mlp_onnx", "1", "cpu")


def _cached(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.is_file() and "locks" not in p.parts]


@pytest.mark.parametrize("fault", ["slowdown", "reset"])
def test_a_throttled_or_reset_manifest_read_is_retried(
    fault: str, model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    store = publish(model_repo, tmp_path, f"manifest-{fault}", "mlp_onnx")
    fault_proxy.faults.set(fault, count=2, where="/images/")
    img = ImageLoader(None, tmp_path / "cache", "cpu", store=store).restore(REF)
    assert fault_proxy.faults.faulted == 2 and img.source == "store"


def test_a_truncated_manifest_is_a_manifest_error_and_nothing_is_cached(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    store = publish(model_repo, tmp_path, "manifest-truncate", "mlp_onnx")
    fault_proxy.faults.set("truncate", where="/images/")
    loader = ImageLoader(None, tmp_path / "cache", "cpu", store=store)
    with pytest.raises(ManifestError, match="not valid JSON"):
        loader.restore(REF)
    assert loader.find("mlp_onnx", "1", None) is None  # a bad image is skipped: files load
    assert not _cached(tmp_path / "cache")


def test_a_stalled_manifest_read_times_out(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    publish(model_repo, tmp_path, "manifest-stall", "mlp_onnx")
    store = s3_store("manifest-stall", max_attempts=1, read_timeout=1)
    fault_proxy.faults.stall_s = 10
    fault_proxy.faults.set("stall", where="/images/")
    started = time.monotonic()
    with pytest.raises(StoreTimeout, match="timed out"):
        ImageLoader(None, tmp_path / "cache", "cpu", store=store).restore(REF)
    assert time.monotonic() - started < 8
    assert not _cached(tmp_path / "cache")


def test_throttling_past_the_retry_budget_is_a_clear_error_then_recovers(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    publish(model_repo, tmp_path, "throttled", "mlp_onnx")
    attempts = 3
    config = S3Config(max_parallel=1, range_bytes=RANGE_BYTES, max_attempts=attempts,
                      retry_mode="standard", connect_timeout_s=2, read_timeout_s=5)  # fmt: skip
    store = S3Store(f"s3://{BUCKET}/throttled", config)
    fault_proxy.faults.set("slowdown")  # every chunk GET, for good
    started = time.monotonic()
    with pytest.raises(SnapshotStoreError, match="SlowDown"):
        ImageLoader(None, tmp_path / "cache", "cpu", store=store).restore(REF)
    took = time.monotonic() - started
    faulted = fault_proxy.faults.faulted
    # Each GET is tried `attempts` times, with backoff. Once one range has given up, no new
    # chunk or range starts (a worker may have taken one more as it freed): at most 3 chunks
    # of 3 ranges here, where the whole image (every range of every chunk: 52 GETs refused
    # before the fix) would be asked for again and again otherwise.
    assert attempts <= faulted <= attempts * 3 * 3, faulted
    assert not [p for p in _cached(tmp_path / "cache") if "/chunks/" in str(p)]
    fault_proxy.faults.set("none", 0)
    img = ImageLoader(None, tmp_path / "cache", "cpu", store=store).restore(REF)
    assert img.source == "store"
    print(f"throttled: {faulted} GETs refused ({attempts} attempts each) in {took:.2f} s")
