"""S3 answers the other fault tests leave out: 403, 404 and 500 on chunk and manifest GETs,
a bucket deleted under the store, a chunk object replaced by other bytes. Through the fault
proxy in front of the real (moto) S3 server; each says what the restore raises, that it is
bounded in time, and that nothing partial is left in the node cache."""

from __future__ import annotations

import time
from pathlib import Path

import boto3
import pytest
from s3_images import RANGE_BYTES, publish, s3_store
from snapshot_s3_fakes import BUCKET, FaultProxy

from snapshotter import (
    ImageLoader,
    IntegrityError,
    ManifestError,
    SnapshotError,
    SnapshotStoreError,
    build_image,
)
from snapshotter.image_ref import ImageRef
from snapshotter.manifest import MAX_MANIFEST_BYTES
from snapshotter.stores.dir_store import DirStore
from snapshotter.stores.s3_store import S3Config, S3Store
from snapshotter.transfer import copy_image

pytestmark = pytest.mark.integration

REF = ImageRef("mlp_onnx", "1", "cpu")


def _cached_chunks(cache: Path) -> list[Path]:
    """Chunk files (published or temporary) left in the cache."""
    return [p for p in cache.rglob("*") if p.is_file() and "chunks" in p.parts]


@pytest.mark.parametrize("status", ["403", "404", "500"])
def test_an_error_answer_to_a_chunk_get_is_a_store_error_and_caches_nothing(
    status: str, model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    publish(model_repo, tmp_path, f"chunk-{status}", "mlp_onnx")
    store = s3_store(f"chunk-{status}", max_attempts=2, retry_mode="standard")
    fault_proxy.faults.set(status)
    loader = ImageLoader(None, tmp_path / "cache", "cpu", store=store)
    started = time.monotonic()
    with pytest.raises(SnapshotError) as caught:
        loader.restore(REF)
    took = time.monotonic() - started
    print(f"{status}: {type(caught.value).__name__}: {caught.value} in {took:.2f}s "
          f"after {fault_proxy.faults.faulted} GETs")  # fmt: skip
    if status == "404":  # the manifest names a chunk the store does not have
        assert isinstance(caught.value, IntegrityError) and "missing" in str(caught.value)
    else:
        assert isinstance(caught.value, SnapshotStoreError)
    # At most two tries (`max_attempts`) per range of the image's blobs: before, botocore
    # took it for the number of retries (three tries each); no range is asked for again.
    manifest = loader.manifest(REF)
    ranges = sum(-(-b.size // RANGE_BYTES) for b in manifest.blobs())
    assert 1 <= fault_proxy.faults.faulted <= 2 * ranges, (fault_proxy.faults.faulted, ranges)
    assert not _cached_chunks(tmp_path / "cache")
    fault_proxy.faults.set("none", 0)
    assert loader.restore(REF).source == "store"


@pytest.mark.parametrize("status", ["403", "404", "500"])
def test_an_error_answer_to_the_manifest_get(
    status: str, model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    publish(model_repo, tmp_path, f"manifest-{status}", "mlp_onnx")
    store = s3_store(f"manifest-{status}", max_attempts=2, retry_mode="standard")
    fault_proxy.faults.set(status, where="/images/")
    loader = ImageLoader(None, tmp_path / "cache", "cpu", store=store)
    with pytest.raises(SnapshotError) as caught:
        loader.restore(REF)
    print(f"manifest {status}: {type(caught.value).__name__}: {caught.value}")
    assert isinstance(caught.value, SnapshotStoreError) == (status != "404")
    assert loader.find("mlp_onnx", "1", None) is None
    assert not list((tmp_path / "cache").rglob("manifest.json"))


def test_a_bucket_deleted_under_the_store(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    boto3.client("s3", endpoint_url=fault_proxy.url).create_bucket(Bucket="doomed")
    local = DirStore(tmp_path / "built")
    build_image(model_repo / "mlp_onnx" / "1", local, max_chunk_bytes=256 << 10)
    store = S3Store(
        "s3://doomed/p", S3Config(max_attempts=2, connect_timeout_s=2, read_timeout_s=10)
    )
    copy_image(local, store, REF)
    loader = ImageLoader(None, tmp_path / "cache", "cpu", store=store)
    manifest = loader.manifest(REF)
    client = boto3.client("s3", endpoint_url=fault_proxy.url)
    for page in client.get_paginator("list_objects_v2").paginate(Bucket="doomed"):
        for obj in page.get("Contents", []):
            client.delete_object(Bucket="doomed", Key=obj["Key"])
    client.delete_bucket(Bucket="doomed")
    with pytest.raises(SnapshotError) as caught:
        loader.restore(REF)
    assert "NoSuchBucket" in str(caught.value), caught.value
    fresh = ImageLoader(None, tmp_path / "cache2", "cpu", store=store)
    assert fresh.find("mlp_onnx", "1", None) is None  # skipped: the model loads its files
    assert not _cached_chunks(tmp_path / "cache") and not _cached_chunks(tmp_path / "cache2")
    assert manifest.chunks


def test_a_chunk_object_replaced_by_other_bytes_is_an_integrity_error(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    store = publish(model_repo, tmp_path, "replaced", "mlp_onnx")
    loader = ImageLoader(None, tmp_path / "cache", "cpu", store=store)
    manifest = loader.manifest(REF)
    client = boto3.client("s3", endpoint_url=fault_proxy.url)
    digest = manifest.chunks[0].digest
    key = f"replaced/chunks/{digest}"
    head = client.head_object(Bucket=BUCKET, Key=key)
    for body in (b"x" * head["ContentLength"], b"x" * 10, b"x" * (head["ContentLength"] + 10)):
        client.put_object(Bucket=BUCKET, Key=key, Body=body)
        with pytest.raises(SnapshotError) as caught:
            loader.restore(REF)
        print(f"replaced {len(body)}: {type(caught.value).__name__}: {caught.value}")
        assert isinstance(caught.value, IntegrityError) and digest in str(caught.value)
        # The other chunks were verified and may stay; of this one nothing, not even a temp.
        assert not [p for p in _cached_chunks(tmp_path / "cache") if digest[:16] in p.name]


def test_an_object_over_the_manifest_cap_is_refused_unread(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    """Before: the whole object was read into memory (any size), then refused by the parser."""
    store = publish(model_repo, tmp_path, "huge-manifest", "mlp_onnx")
    client = boto3.client("s3", endpoint_url=fault_proxy.url)
    key = f"huge-manifest/{REF.key}/manifest.json"
    client.put_object(Bucket=BUCKET, Key=key, Body=b" " * (MAX_MANIFEST_BYTES + 1))
    with pytest.raises(ManifestError, match="over"):
        store.read_manifest(REF)
    loader = ImageLoader(None, tmp_path / "cache", "cpu", store=store)
    assert loader.find("mlp_onnx", "1", None) is None


def test_s3_gone_mid_download_is_a_store_error_and_caches_nothing(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    """Every chunk GET cut mid-body (the server going away during the download): each range
    is retried `stream_retries` times from where it stopped, then the restore fails."""
    publish(model_repo, tmp_path, "gone", "mlp_onnx")
    store = s3_store("gone", max_attempts=2, retry_mode="standard")
    fault_proxy.faults.set("reset")
    loader = ImageLoader(None, tmp_path / "cache", "cpu", store=store)
    with pytest.raises(SnapshotStoreError, match="reading chunk"):
        loader.restore(REF)
    manifest = loader.manifest(REF)
    ranges = sum(-(-b.size // RANGE_BYTES) for b in manifest.blobs())
    # stream_retries (3) tries of each range at most, each of which botocore may retry.
    assert 1 <= fault_proxy.faults.faulted <= 3 * 2 * ranges, fault_proxy.faults.faulted
    assert not _cached_chunks(tmp_path / "cache")
