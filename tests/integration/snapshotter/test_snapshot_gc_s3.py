"""`gc` with a grace period on an S3 store (moto on 127.0.0.1): LastModified decides, and a
chunk a push reuses after gc planned is touched (copied onto itself) and survives."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from snapshot_s3_fakes import BUCKET

from snapshotter import build_image
from snapshotter.stores.dir_store import DirStore
from snapshotter.stores.s3_store import S3Config, S3Store
from snapshotter.transfer import copy_image, delete_garbage, plan_gc, verify_image

pytestmark = pytest.mark.integration

GRACE = 2.0  # S3's LastModified has whole seconds


def test_s3_gc_keeps_young_orphans_and_chunks_reused_after_the_plan(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str]
) -> None:
    local = DirStore(tmp_path / "built")
    manifest = build_image(model_repo / "mlp_onnx" / "1", local, max_chunk_bytes=256 << 10)
    store = S3Store(f"s3://{BUCKET}/gc", S3Config(max_parallel=2))
    copy_image(local, store, manifest.ref)
    image_chunks = {c.digest for c in manifest.chunks}
    orphan = "ab" * 32
    store.write_chunk(orphan, memoryview(b"nobody references me"))

    stats = store.chunk_stats()
    assert set(stats) == image_chunks | set(manifest.all_digests()) | {orphan}
    assert abs(stats[orphan].modified - time.time()) < 120
    assert stats[orphan].size == len(b"nobody references me")
    young = plan_gc(store, grace_s=3600, now=time.time())
    assert young.unreferenced == {} and set(young.recent) == {orphan}

    # The image's manifest goes away: its chunks are unreferenced and, a little later, older
    # than a (short) grace period, so gc plans to delete them with the orphan...
    store.delete_manifest(manifest.ref)
    time.sleep(GRACE + 0.5)
    plan = plan_gc(store, grace_s=GRACE, now=time.time())
    assert set(plan.unreferenced) == set(manifest.all_digests()) | {orphan}
    # ...while a push of the same image reuses those chunks (touching them: S3 copies each
    # onto itself) and writes the manifest. The deletion re-checks every chunk right before
    # deleting it: the touched ones are young again and stay; the orphan goes.
    copy_image(local, store, manifest.ref)
    deleted = delete_garbage(store, plan, grace_s=GRACE, clock=time.time)
    assert deleted == [orphan]
    verify_image(store, manifest.ref)  # every chunk still there and intact
    assert store.chunk_stat(orphan) is None
    assert store.touch_chunk(orphan) is False
