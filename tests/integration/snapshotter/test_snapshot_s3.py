"""Build → push to S3 (moto on 127.0.0.1) → restore through the cache, with S3 faults injected."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3_images import publish, s3_store
from snapshot_s3_fakes import BUCKET, FaultProxy

from snapshotter import ImageLoader, IntegrityError, StoreTimeout, source_digest
from snapshotter.image_ref import ImageRef
from snapshotter.stores.dir_store import DirStore
from snapshotter.stores.s3_store import S3Config, S3Store

pytestmark = pytest.mark.integration


def onnx_outputs(session_bytes_or_path: Any, x: np.ndarray, img: Any = None) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    if img is not None:
        names = list(img.tensors)
        values = [ort.OrtValue.ortvalue_from_numpy(img.tensors[n]) for n in names]
        options.add_external_initializers(names, values)
    session = ort.InferenceSession(
        session_bytes_or_path, options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, {"x": x})[0]  # type: ignore[no-any-return]


def test_onnx_round_trip_is_bit_exact_and_infers_identically(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    import onnx
    from onnx import numpy_helper

    store = publish(model_repo, tmp_path, "rt-onnx", "mlp_onnx")
    loader = ImageLoader(None, tmp_path / "cache", "cpu", store=store)
    ref = loader.find("mlp_onnx", "1", source_digest(model_repo / "mlp_onnx" / "1"))
    assert ref is not None
    img = loader.restore(ref)
    original = onnx.load(str(model_repo / "mlp_onnx" / "1" / "model.onnx"))
    for init in original.graph.initializer:
        assert np.array_equal(img.tensors[init.name], numpy_helper.to_array(init)), init.name
    graph = img.artifact("onnx_graph")
    assert graph is not None and len(graph) < 20_000  # the weights are not in the graph
    x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)
    want = onnx_outputs(str(model_repo / "mlp_onnx" / "1" / "model.onnx"), x)
    assert np.array_equal(onnx_outputs(graph, x, img), want)
    assert img.source == "store" and img.timings["fetch"] > 0

    gets = fault_proxy.faults.chunk_gets
    again = ImageLoader(None, tmp_path / "cache", "cpu", store=store).restore(ref)
    assert again.source == "cache"
    assert fault_proxy.faults.chunk_gets == gets  # second cold start is local
    assert np.array_equal(onnx_outputs(graph, x, again), want)


def test_torchscript_round_trip_gives_identical_outputs(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str]
) -> None:
    import torch

    store = publish(model_repo, tmp_path, "rt-ts", "mlp_torchscript")
    loader = ImageLoader(None, tmp_path / "cache", "cpu", store=store)
    ref = loader.find("mlp_torchscript", "1", source_digest(model_repo / "mlp_torchscript" / "1"))
    assert ref is not None
    img = loader.restore(ref)
    original = torch.jit.load(str(model_repo / "mlp_torchscript" / "1" / "model.pt"))
    blob = img.artifact("torchscript_weightless")
    assert blob is not None
    module = torch.jit.load(io.BytesIO(blob))
    views = img.torch_tensors()
    with torch.no_grad():
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            assert tensor.numel() == 0  # the archive really is weightless
            tensor.set_(views[name])
    for name, tensor in [*original.named_parameters(), *original.named_buffers()]:
        assert torch.equal(views[name], tensor), name
    x = torch.randn(7, 64)
    assert torch.equal(module(x), original(x))


def test_find_refuses_an_image_built_from_other_files(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str]
) -> None:
    store = publish(model_repo, tmp_path, "stale", "mlp_onnx")
    loader = ImageLoader(None, None, "cpu", store=store)
    assert loader.find("mlp_onnx", "1", "0" * 64) is None
    assert loader.find("mlp_onnx", "2", None) is None
    assert loader.find("mlp_onnx", "1", None) is not None


@pytest.mark.parametrize("fault", ["slowdown", "reset"])
def test_transient_s3_faults_are_survived(
    fault: str, model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    store = publish(model_repo, tmp_path, f"transient-{fault}", "mlp_onnx")
    loader = ImageLoader(None, tmp_path / "cache", "cpu", store=store)
    fault_proxy.faults.set(fault, count=2)
    img = loader.restore(ImageRef("mlp_onnx", "1", "cpu"))
    assert fault_proxy.faults.faulted == 2
    reference = DirStore(tmp_path / "built")
    for chunk, base in zip(img.manifest.chunks, img.manifest.chunk_bases, strict=True):
        expect = reference.chunk_file(chunk.digest).read_bytes()
        assert img.arena.array[base : base + chunk.size].tobytes() == expect


def test_stalled_s3_fails_with_a_timeout_not_a_hang(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    publish(model_repo, tmp_path, "stall", "mlp_onnx")
    store = s3_store("stall", max_attempts=1, stream_retries=2, read_timeout=1)
    loader = ImageLoader(None, tmp_path / "cache", "cpu", store=store)
    fault_proxy.faults.stall_s = 10
    fault_proxy.faults.set("stall")
    started = time.monotonic()
    with pytest.raises(StoreTimeout, match="timed out"):
        loader.restore(ImageRef("mlp_onnx", "1", "cpu"))
    assert time.monotonic() - started < 30
    assert not list((tmp_path / "cache").glob("chunks/*/*"))  # nothing half-written is published


def test_truncated_object_is_an_integrity_error(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    store = publish(model_repo, tmp_path, "truncate", "mlp_onnx")
    loader = ImageLoader(None, tmp_path / "cache", "cpu", store=store)
    fault_proxy.faults.set("truncate")
    with pytest.raises(IntegrityError, match=r"chunk [0-9a-f]{64}"):
        loader.restore(ImageRef("mlp_onnx", "1", "cpu"))
    assert not list((tmp_path / "cache").glob("chunks/*/*"))


def test_corrupted_cache_entry_is_refetched_never_served(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    store = publish(model_repo, tmp_path, "corrupt", "mlp_onnx")
    ref = ImageRef("mlp_onnx", "1", "cpu")
    first = ImageLoader(None, tmp_path / "cache", "cpu", store=store).restore(ref)
    chunk = first.manifest.chunks[0]
    cached = DirStore(tmp_path / "cache").chunk_file(chunk.digest)
    good = cached.read_bytes()
    with cached.open("r+b") as f:  # flip one byte in place, same size
        f.seek(len(good) // 2)
        f.write(bytes([good[len(good) // 2] ^ 0xFF]))
    gets = fault_proxy.faults.chunk_gets
    second = ImageLoader(None, tmp_path / "cache", "cpu", store=store).restore(ref)
    assert fault_proxy.faults.chunk_gets > gets  # refetched from S3
    assert second.arena.array[: chunk.size].tobytes() == good
    assert cached.read_bytes() == good  # and the cache holds good bytes again
    cached.write_bytes(good[:100])  # truncated entry
    third = ImageLoader(None, tmp_path / "cache", "cpu", store=store).restore(ref)
    assert third.arena.array[: chunk.size].tobytes() == good


def test_two_concurrent_cold_starts_download_once(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str], fault_proxy: FaultProxy
) -> None:
    store = publish(model_repo, tmp_path, "concurrent", "mlp_onnx")
    ref = ImageRef("mlp_onnx", "1", "cpu")
    solo = ImageLoader(None, tmp_path / "solo-cache", "cpu", store=store)
    before = fault_proxy.faults.chunk_gets
    solo.restore(ref)
    one_download = fault_proxy.faults.chunk_gets - before

    results: list[Any] = []
    barrier = threading.Barrier(2)

    def cold_start() -> None:
        loader = ImageLoader(None, tmp_path / "shared-cache", "cpu", store=s3_store("concurrent"))
        barrier.wait(10)
        results.append(loader.restore(ref))

    before = fault_proxy.faults.chunk_gets
    threads = [threading.Thread(target=cold_start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 2
    assert fault_proxy.faults.chunk_gets - before == one_download
    assert sorted(r.source for r in results) == ["cache", "store"]
    assert results[0].arena.array.tobytes() == results[1].arena.array.tobytes()


def test_multipart_upload_with_checksums_reads_back_exactly(s3_env: dict[str, str]) -> None:
    import hashlib
    import os

    store = S3Store(f"s3://{BUCKET}/multipart", S3Config(part_bytes=5 << 20, max_parallel=3))
    data = os.urandom((11 << 20) + 123)  # three parts, the last one short
    digest = hashlib.sha256(data).hexdigest()
    store.write_chunk(digest, memoryview(data))
    assert store.chunk_size(digest) == len(data)
    back = bytearray(len(data))
    store.read_chunk_into(digest, memoryview(back), on_bytes=None)
    assert bytes(back) == data
    assert store.list_chunks() == {digest: len(data)}
    store.delete_chunk(digest)
    assert store.chunk_size(digest) is None
