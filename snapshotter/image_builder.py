"""Build an image from a Triton model version directory: extract, lay out, hash, store."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from snapshotter.compiled_artifacts import build_compiled, read_model_config
from snapshotter.digest_index import DigestIndex, index_for_store
from snapshotter.errors import BuildError, NothingToImage
from snapshotter.image_ref import check_model_name, check_target, check_version
from snapshotter.manifest import (
    ALIGNMENT,
    ChunkEntry,
    Manifest,
    ShardEntry,
    TensorEntry,
    align_up,
)
from snapshotter.model_files import MAX_FILE_BYTES
from snapshotter.source_digest import file_digest, source_digest
from snapshotter.sources import ExtractedModel, SourceTensor
from snapshotter.sources.checkpoint_dir import has_shards, scan_checkpoint
from snapshotter.stores.base import ImageStore

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 256 << 20

BuildProgress = Callable[[int, int], None]
"""`(nbytes just stored, total weight bytes)`; called from worker threads."""


@dataclass(frozen=True)
class Placement:
    """Where the layout put one tensor: chunk index and aligned offset inside it."""

    chunk: int
    offset: int


def plan_layout(sizes: list[int], max_chunk_bytes: int) -> tuple[list[Placement], list[int]]:
    """Pack tensors in order into chunks of at most `max_chunk_bytes` (a larger tensor gets a
    chunk of its own); every offset is 4 KiB aligned. Returns placements and chunk sizes."""
    placements: list[Placement] = []
    chunk_sizes: list[int] = []
    used = None
    for size in sizes:
        start = 0 if used is None else align_up(used, ALIGNMENT)
        if used is None or (start + size > max_chunk_bytes and used > 0):
            chunk_sizes.append(0)
            start = 0
        placements.append(Placement(len(chunk_sizes) - 1, start))
        used = start + size
        chunk_sizes[-1] = used
    return placements, chunk_sizes


def _all_graph_optimizations(version_dir: Path) -> bool:
    """Whether the model's config leaves onnxruntime every graph optimization: its
    `optimization.graph.level` is none of Triton's -1 (basic), 1 (extended), 2 (none)."""
    config = read_model_config(version_dir.parent)
    return config is None or config.optimization.graph.level not in (-1, 1, 2)


def pick_source(version_dir: Path, *, ort_optimize: bool = False) -> Callable[[], ExtractedModel]:
    """The reader for the model file Triton would load from `version_dir`."""
    if (version_dir / "model.onnx").is_file():
        from snapshotter.sources.onnx_source import extract_onnx

        return lambda: extract_onnx(version_dir / "model.onnx", ort_optimize=ort_optimize)
    if (version_dir / "model.pt").is_file():
        from snapshotter.sources.torchscript_source import extract_torchscript

        return lambda: extract_torchscript(version_dir / "model.pt")
    if (version_dir / "model.pt2").is_file():
        from snapshotter.sources.export_source import extract_exported

        return lambda: extract_exported(version_dir / "model.pt2")
    if (version_dir / "model.plan").is_file():
        # No weights to lay out: the engine itself becomes a keyed artifact (plan_engine).
        return lambda: ExtractedModel(framework="tensorrt_plan", tensors=[])
    if has_shards(version_dir):
        from snapshotter.sources.safetensors_source import extract_checkpoint

        checkpoint = scan_checkpoint(version_dir)  # now: a hostile directory is refused first
        return lambda: extract_checkpoint(checkpoint)
    raise NothingToImage(
        f"{version_dir}: no model.onnx, model.pt, model.pt2, model.plan or *.safetensors to "
        "build from"
    )


def build_image(
    version_dir: Path,
    store: ImageStore,
    *,
    model: str | None = None,
    version: str | None = None,
    target: str = "cpu",
    max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    hash_threads: int = 2,
    progress: BuildProgress | None = None,
    digest_index: DigestIndex | None = None,
    ort_optimize: bool = False,
) -> Manifest:
    """Build the image of one model version into `store` and return its manifest.

    `model` and `version` default to the directory names (`<repo>/<model>/<version>`).
    Chunks already in the store (same digest) are not written again. `progress(nbytes,
    total_bytes)` is called from worker threads as chunks are stored. The file hashes land
    in `digest_index` (default: the one next to a directory store, e.g. the node cache), so
    a runtime process checking the image against the files does not hash them again.
    `ort_optimize` stores onnxruntime's optimized graph of an ONNX model instead of the
    portable one: a faster restore, but only on hosts like this one (same onnxruntime, same
    CPU features); elsewhere the runtime loads the model file.
    The compiled artifacts the model's config asks for (torch compile caches, TensorRT engine
    caches: see `compiled_artifacts`) are built here too, keyed by target and versions.
    """
    version_dir = Path(version_dir)
    model = check_model_name(model or version_dir.resolve().parent.name)
    version = check_version(version or version_dir.name)
    check_target(target)
    if ort_optimize and target != "cpu":
        logger.info("model=%s: a %s image keeps the portable ONNX graph (onnxruntime's "
                    "optimized one is for its CPU provider)", model, target)  # fmt: skip
        ort_optimize = False
    if ort_optimize and not _all_graph_optimizations(version_dir):
        logger.info("model=%s: its config asks for fewer of onnxruntime's graph optimizations "
                    "(optimization.graph.level): the image keeps the portable ONNX graph",
                    model)  # fmt: skip
        ort_optimize = False
    start = time.perf_counter()
    read_source = pick_source(version_dir, ort_optimize=ort_optimize)
    index = digest_index or index_for_store(store)
    digest = source_digest(version_dir, index=index)
    extracted = read_source()
    compiled = build_compiled(version_dir, extracted, target, source_digest=digest)
    chunks, tensors = _write_weights(
        extracted.tensors, store, max_chunk_bytes, hash_threads, progress
    )
    blobs = {**extracted.artifacts, **compiled.artifacts}
    artifacts = {name: _put_blob(store, data) for name, data in blobs.items()}
    manifest = Manifest(
        model=model,
        version=version,
        target=target,
        source_digest=digest,
        framework=extracted.framework,
        framework_versions=extracted.framework_versions,
        chunks=tuple(chunks),
        tensors=tuple(tensors),
        artifacts=artifacts,
        artifact_keys=compiled.keys,
        shards=_shard_entries(extracted, index),
        files={p.name: _put_blob(store, _small_file(p)) for p in extracted.files},
    )
    Manifest.from_json(manifest.to_json())  # what we write must pass our own reader
    store.write_manifest(manifest.ref, manifest.to_json())
    logger.info(
        "built image model=%s version=%s target=%s tensors=%d bytes=%d in %.2fs",
        model, version, target, len(tensors), manifest.weight_bytes, time.perf_counter() - start,
    )  # fmt: skip
    return manifest


def _write_weights(
    source: list[SourceTensor],
    store: ImageStore,
    max_chunk_bytes: int,
    threads: int,
    progress: BuildProgress | None,
) -> tuple[list[ChunkEntry], list[TensorEntry]]:
    placements, sizes = plan_layout([t.array.nbytes for t in source], max_chunk_bytes)
    total = sum(sizes)
    by_chunk: dict[int, list[tuple[SourceTensor, Placement]]] = {}
    for tensor, place in zip(source, placements, strict=True):
        by_chunk.setdefault(place.chunk, []).append((tensor, place))
    # Chunks are packed one at a time and hashed + stored in threads, at most `threads`
    # in flight, so building a large model holds only a few chunks beyond the source.
    futures: list[Future[ChunkEntry]] = []
    with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="thaw-build") as ex:
        for index, size in enumerate(sizes):
            if len(futures) >= threads:
                futures[-threads].result()
            buffer = _pack(by_chunk.get(index, []), size)
            futures.append(ex.submit(_put_blob, store, buffer, progress, total))
        chunks = [f.result() for f in futures]
    tensors = [
        TensorEntry(t.name, t.dtype, tuple(t.array.shape), p.chunk, p.offset, t.array.nbytes)
        for t, p in zip(source, placements, strict=True)
    ]
    return chunks, tensors


def _shard_entries(extracted: ExtractedModel, index: DigestIndex | None) -> tuple[ShardEntry, ...]:
    """The checkpoint's shards with their digests (free: `source_digest` just hashed them).
    A lone `model.safetensors` with no other file records none, so its manifest stays at
    format version 1, readable by older runtimes; its `source_digest` names the file anyway."""
    if len(extracted.shards) <= 1 and not extracted.files:
        return ()
    return tuple(
        ShardEntry(p.name, file_digest(p, index=index), p.stat().st_size) for p in extracted.shards
    )


def _small_file(path: Path) -> bytes:
    """A model file's bytes (a tokenizer or config file: bounded, read whole)."""
    with path.open("rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise BuildError(f"{path} grew over {MAX_FILE_BYTES} bytes during the build")
    return data


def _pack(items: list[tuple[SourceTensor, Placement]], size: int) -> np.ndarray:
    buffer = np.zeros(size, dtype=np.uint8)
    for tensor, place in items:
        flat = np.ascontiguousarray(tensor.array).reshape(-1).view(np.uint8)
        buffer[place.offset : place.offset + flat.nbytes] = flat
    return buffer


def _put_blob(
    store: ImageStore,
    data: bytes | np.ndarray,
    progress: BuildProgress | None = None,
    total: int = 0,
) -> ChunkEntry:
    view = memoryview(data if isinstance(data, bytes) else data.data).cast("B")
    digest = hashlib.sha256(view).hexdigest()
    # A chunk already stored is touched, so a concurrent `gc` (grace period) keeps it until
    # the manifest that references it is written.
    if store.chunk_size(digest) != len(view) or not store.touch_chunk(digest):
        store.write_chunk(digest, view)
    if progress is not None:
        progress(len(view), total)
    return ChunkEntry(digest=digest, size=len(view))
