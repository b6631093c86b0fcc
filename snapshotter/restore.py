"""`ImageLoader`: find an image, then restore it into an arena from host memory, cache or store.

Order of tiers: host memory (one copy) → node-local cache (parallel `preadv` of verified
chunks) → store (parallel ranged GETs into the arena, teed into the cache, under a per-image
lock so concurrent cold starts download once). Bytes from a store are always checked against
their digest before they are served or cached. A GPU target's path is `device_restore`'s: it
gets these tiers from the loader as a `HostSide`.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from snapshotter.arena import Arena
from snapshotter.artifact_archive import UNPACKED_DIR
from snapshotter.chunk_trust import check_chunk, trusted_chunks
from snapshotter.cuda_restore import CopierFactory, DeviceConfig
from snapshotter.device_budget import DeviceMemorySource
from snapshotter.device_restore import DeviceSettings, HostRead, HostSide, restore_image_to_device
from snapshotter.digest_index import INDEX_NAME, DigestIndex, index_for_store
from snapshotter.errors import ImageNotFound, IntegrityError, SnapshotError
from snapshotter.host_cache import Clock, HostCache, Piece
from snapshotter.image_ref import ImageRef, resolve_target
from snapshotter.manifest import ChunkEntry, Manifest, align_up
from snapshotter.model_files import write_files
from snapshotter.ordered_digest import OrderedDigest
from snapshotter.parallel_read import ReadJob, read_into
from snapshotter.pvc_cache import NodeCache
from snapshotter.restored_image import RestoredImage, process_unpack_root
from snapshotter.source_digest import source_digest
from snapshotter.staging_ring import ReadFn, StagingPool
from snapshotter.stores import ImageStore, open_store
from snapshotter.stores.dir_store import DirStore

logger = logging.getLogger(__name__)


class ImageLoader:
    """Finds and restores images for one runtime process (blocking; call it in a thread).

    `store_uri` is `s3://bucket/prefix` or a directory; `cache_dir` the node-local cache.
    `verify="marker"` trusts cache chunks whose verified marker matches the file their bytes
    are read from (size, mtime, inode); `verify="full"` re-hashes every chunk on every restore
    (to a GPU too).
    `store` (an already configured adapter) replaces `store_uri` when given. `direct_io`:
    fills from the store are written to the cache with O_DIRECT where aligned (no page-cache
    copy; see `direct_io`). `direct_reads`: cold cache chunks are read with O_DIRECT too — off
    by default: an ordinary read leaves the chunks in the page cache, so the next cold start
    of the same model (scale to zero wakes the same models again and again) reads them from
    memory at ~13 GB/s instead of from the device; O_DIRECT reads never populate it.

    The host tier (`host_cache_dir`, `host_max_bytes`; `host_cache.HostCache`) is shared by
    every process using the same directory: a restore that finds its image there maps it; one
    that does not has the tier copy the image from its verified chunk files afterwards, in the
    background (`host_publish_delay_s` after the restore).

    GPU targets (`restore(..., device="cuda:N")`, see `device_restore`): `device` shapes the
    staging ring and the VRAM headroom; `staging` is a warm process's pre-pinned ring;
    `copier_factory(device)` makes the device's `DeviceCopier` (default: CUDA through torch)
    and `device_memory` reads its free memory (default: the CUDA copier's own reading; none
    for an injected factory unless given); `device_read` replaces the ring's file reader
    (tests inject faults with it). Every byte reaches the GPU through the pinned ring, from
    the cache's chunk files or from the host tier's mapping (never page-locked itself: see
    docs/gpu.md, "The host tier and CUDA").
    """

    def __init__(
        self,
        store_uri: str | None,
        cache_dir: Path | None,
        target: str = "cpu",
        *,
        read_threads: int = 4,
        verify: str = "marker",
        max_cache_bytes: int | None = None,
        host_cache_dir: Path | None = None,
        host_max_bytes: int = 0,
        host_retention_s: float = float("inf"),
        host_publish_delay_s: float = 2.0,
        clock: Clock = time.time,
        store: ImageStore | None = None,
        direct_io: bool = True,
        direct_reads: bool = False,
        device: DeviceConfig | None = None,
        staging: StagingPool | None = None,
        copier_factory: CopierFactory | None = None,
        device_memory: DeviceMemorySource | None = None,
        device_read: ReadFn | None = None,
    ) -> None:
        if verify not in ("marker", "full"):
            raise SnapshotError(f"`verify` = {verify!r}, must be one of marker, full")
        self.target = resolve_target(target)
        if store is None and store_uri:
            store = open_store(store_uri, read_threads=read_threads)
        self.store = store
        self.cache = (
            NodeCache(Path(cache_dir), max_bytes=max_cache_bytes, direct_io=direct_io)
            if cache_dir
            else None
        )
        self.read_threads, self.verify, self.direct_io = read_threads, verify, direct_io
        self.direct_reads = direct_reads
        self.host = HostCache(
            host_cache_dir,
            max_bytes=host_max_bytes,
            retention_s=host_retention_s,
            clock=clock,
            publish_delay_s=host_publish_delay_s,
        )
        self.digest_index = (
            DigestIndex(Path(cache_dir) / INDEX_NAME) if cache_dir else index_for_store(store)
        )
        # Archive artifacts (compile and engine caches) unpack next to the chunks they came from.
        self._unpack_root = Path(cache_dir) / UNPACKED_DIR if cache_dir else None
        self._gpu = DeviceSettings(
            device or DeviceConfig(), staging, copier_factory, device_memory, device_read
        )

    @property
    def device_config(self) -> DeviceConfig:
        """The staging ring's shape, reader threads and VRAM headroom of GPU restores."""
        return self._gpu.config

    @property
    def staging(self) -> StagingPool | None:
        """A warm process's pre-pinned ring that GPU restores borrow, if one was given."""
        return self._gpu.staging

    def source_digest(self, version_dir: Path) -> str:
        """`source_digest` of `version_dir`, remembered in the cache's persistent index: a
        fresh process re-hashes only files whose stat changed since any process hashed them."""
        return source_digest(version_dir, index=self.digest_index)

    # -- find ------------------------------------------------------------------------------
    def find(self, model: str, version: str, source_digest: str | None) -> ImageRef | None:
        """The image of this model version for our target, if one was built from files with
        `source_digest` (None accepts any); None when there is none or its manifest is bad."""
        try:
            ref = ImageRef(model, str(version), self.target)
            manifest = self.manifest(ref)
        except ImageNotFound:
            return None
        except SnapshotError as exc:
            logger.warning("image unusable model=%s version=%s: %s", model, version, exc)
            return None
        if source_digest is not None and manifest.source_digest != source_digest:
            logger.info("image is stale model=%s version=%s", model, version)
            return None
        return ref

    def manifest(self, ref: ImageRef) -> Manifest:
        """The validated manifest of `ref` from the cache, else from the store."""
        for tier in (self.cache.store if self.cache else None, self.store):
            if tier is None:
                continue
            try:
                manifest = Manifest.from_json(tier.read_manifest(ref))
            except ImageNotFound:
                continue
            if manifest.ref != ref:
                raise SnapshotError(f"manifest at {ref.key} describes {manifest.ref}")
            return manifest
        raise ImageNotFound(f"no image {ref}")

    # -- restore ---------------------------------------------------------------------------
    def restore(
        self,
        ref: ImageRef,
        arena: Arena | None = None,
        *,
        device: str | None = None,
        cancel: threading.Event | None = None,
    ) -> RestoredImage:
        """Restore `ref` into `arena` (or a new one when absent or too small; the host tier's
        mapping instead when it keeps the image); with `device="cuda:N"`, into one arena on
        that GPU instead (`cuda_restore`; `arena`, when big enough, then holds the chunks that
        must pass through host memory first: fetched or not yet verified). Raises
        DeviceMemoryError when the GPU has no room, RestoreCancelled once `cancel` is set."""
        start = time.perf_counter()
        manifest = self.manifest(ref)
        if device is not None and device != "cpu":
            if self.cache is None:
                raise SnapshotError(
                    "restoring to a GPU reads from the node cache: give a cache dir"
                )
            return restore_image_to_device(
                manifest, device, arena, start, cancel, settings=self._gpu, tiers=self._tiers()
            )
        mdigest = hashlib.sha256(manifest.to_json()).hexdigest()
        if arena is not None and arena.nbytes < manifest.arena_bytes:
            logger.warning(
                "arena of %d bytes is smaller than image %s (%d bytes): restoring into fresh "
                "memory, whose page faults cost more than the read",
                arena.nbytes, ref, manifest.arena_bytes,
            )  # fmt: skip
        timings: dict[str, float] = {"fetch": 0.0, "read": 0.0, "verify": 0.0}
        # Artifacts and model files travel with the chunks (same read, verify, fetch and lock
        # path), so a concurrent cold start never downloads them a second time.
        dests, entries = _side_blobs(manifest)
        t0 = time.perf_counter()
        kept = self.host.get(mdigest, manifest.arena_bytes)
        if kept is not None:  # mapped, shared with every process that keeps it mapped
            arena = kept
            timings["read"] = time.perf_counter() - t0
        else:
            if arena is None or arena.nbytes < manifest.arena_bytes:
                arena = Arena(manifest.arena_bytes)
            entries += manifest.chunks
            for chunk, base in zip(manifest.chunks, manifest.chunk_bases, strict=True):
                dests[chunk.digest] = arena.memoryview(base, chunk.size)
        fetched = self._restore_entries(manifest, entries, dests, timings)
        source = "host" if kept is not None else ("store" if fetched else "cache")
        # Read from `dests` by digest: an artifact whose bytes equal a chunk's shares its
        # digest, and then the chunk's destination is the one that was filled.
        artifacts = {name: bytes(dests[c.digest]) for name, c in manifest.artifacts.items()}
        files_dir = self._write_model_files(manifest, dests)
        if self.cache is not None and source != "cache":
            self.cache.store.write_manifest(ref, manifest.to_json())
        if kept is None:
            self._keep_in_host_tier(manifest, mdigest)
        timings["total"] = time.perf_counter() - start
        logger.info(
            "restored model=%s version=%s from=%s bytes=%d total=%.3fs",
            ref.model, ref.version, source, manifest.weight_bytes, timings["total"],
        )  # fmt: skip
        return RestoredImage(
            ref, manifest, arena, _views(manifest, arena), artifacts, timings, source,
            unpack_root=self._unpack_root, files_dir=files_dir,
        )  # fmt: skip

    def _write_model_files(self, manifest: Manifest, dests: dict[str, memoryview]) -> Path | None:
        """Write the image's verified model files (tokenizer, configs) to their directory."""
        if manifest.files_dir_name is None:
            return None
        data = {name: dests[c.digest] for name, c in manifest.files.items()}
        root = self._unpack_root or process_unpack_root()
        return write_files(data, root, manifest.files_dir_name)

    def _keep_in_host_tier(self, manifest: Manifest, mdigest: str) -> None:
        """Have the host tier copy this image from the cache's verified chunk files (in the
        background), so the next restore of it by any process maps it."""
        if not self.host.enabled:
            return
        pieces = self._chunk_files(manifest)
        if pieces is not None:
            self.host.publish_later(mdigest, manifest.arena_bytes, pieces)

    def _chunk_files(self, manifest: Manifest) -> list[Piece] | None:
        """Where each chunk's verified bytes lie on this machine: the cache, else a directory
        store (read in place); None when one is in neither."""
        pieces = []
        for chunk, base in zip(manifest.chunks, manifest.chunk_bases, strict=True):
            home = self._chunk_home(chunk)
            if home is None:
                return None
            # The tier copies the file it opens; a cache chunk must then still be the file
            # its marker names (the cache marks every chunk it verified). A directory store is
            # only read, never marked, so its chunks may carry none: copied as they are.
            trusted = (
                functools.partial(home.is_verified, chunk.digest, chunk.size)
                if self.cache is not None and home is self.cache.store
                else None
            )
            pieces.append(Piece(home.chunk_file(chunk.digest), base, chunk.size, trusted))
        return pieces

    def _chunk_home(self, chunk: ChunkEntry) -> DirStore | None:
        """The first local directory holding `chunk` at its size: the cache, else a directory
        store. A restore reads (and checks) a chunk from the same place."""
        stores = (self.cache.store if self.cache else None, self.store)
        return next(
            (
                s
                for s in stores
                if isinstance(s, DirStore) and s.chunk_size(chunk.digest) == chunk.size
            ),
            None,
        )

    def keep_in_host_tier(self, ref: ImageRef) -> bool:
        """Copy the cached image `ref` into the host tier now (blocking), as a restore would
        in the background; False when the tier is off, the image is too large or kept."""
        if self.cache is None or not self.host.enabled:
            return False
        manifest = self.manifest(ref)
        store = self.cache.store
        if not all(store.is_verified(c.digest, c.size) for c in manifest.chunks):
            raise IntegrityError(f"image {ref} is not wholly verified in the cache", digest="")
        mdigest = hashlib.sha256(manifest.to_json()).hexdigest()
        if manifest.arena_bytes == 0 or manifest.arena_bytes > self.host.max_bytes:
            return False
        pieces = self._chunk_files(manifest)
        return pieces is not None and self.host.publish(mdigest, manifest.arena_bytes, pieces)

    def eviction_counts(self) -> dict[str, tuple[int, int]]:
        """Entries evicted by this process and their bytes, per tier ("host", "node")."""
        node = (self.cache.evictions, self.cache.evicted_bytes) if self.cache else (0, 0)
        return {"host": (self.host.evictions, self.host.evicted_bytes), "node": node}

    def _tiers(self) -> HostSide:
        """This loader's host-side tiers as a GPU restore (`device_restore`) uses them."""
        return HostSide(
            host=self.host,
            chunk_home=self._chunk_home,
            read_through_host=self._read_through_host,
            keep_in_host_tier=self._keep_in_host_tier,
            use_markers=self.verify == "marker",
            unpack_root=self._unpack_root,
        )

    def _read_through_host(
        self,
        manifest: Manifest,
        todo: list[ChunkEntry],
        arena: Arena | None,
        timings: dict[str, float],
    ) -> HostRead:
        """Read the artifacts, the model files and the `todo` chunks (fetched, or hashed, then
        marked) through host memory: `arena` when it is big enough, else fresh memory. Returns
        the artifacts, the model files' directory, whether anything came from the store, and
        the `todo` chunks' checked bytes by digest."""
        dests, entries = _side_blobs(manifest)
        need = sum(align_up(c.size) for c in todo)
        staging = arena if arena is not None and arena.nbytes >= need else Arena(need)
        pos = 0
        for chunk in todo:
            dests[chunk.digest] = staging.memoryview(pos, chunk.size)
            pos += align_up(chunk.size)
        fetched = self._restore_entries(manifest, [*entries, *todo], dests, timings)
        artifacts = {name: bytes(dests[c.digest]) for name, c in manifest.artifacts.items()}
        checked = {c.digest: dests[c.digest] for c in todo}
        return artifacts, self._write_model_files(manifest, dests), fetched, checked

    def _restore_entries(
        self,
        manifest: Manifest,
        entries: list[ChunkEntry],
        dests: dict[str, memoryview],
        timings: dict[str, float],
    ) -> bool:
        """Fill `dests` for `entries` from the cache, else the store; True if any was fetched."""
        cached, missing = self._split(tuple(entries))
        if cached:
            missing += self._read_cached(cached, dests, timings)
        return bool(missing) and self._fetch_missing(manifest, missing, dests, timings) > 0

    def _split(self, chunks: tuple[ChunkEntry, ...]) -> tuple[list[ChunkEntry], list[ChunkEntry]]:
        if self.cache is None:
            return [], list(chunks)
        local = [c for c in chunks if self.cache.store.chunk_size(c.digest) == c.size]
        return local, [c for c in chunks if c not in local]

    def _read_cached(
        self, chunks: list[ChunkEntry], dests: dict[str, memoryview], timings: dict[str, float]
    ) -> list[ChunkEntry]:
        """Read cached chunks into the arena; return those that failed verification (deleted)."""
        if self.cache is None:
            raise SnapshotError("no cache configured")
        store = self.cache.store
        jobs = [ReadJob(store.chunk_file(c.digest), 0, dests[c.digest], c.digest) for c in chunks]
        t0 = time.perf_counter()
        read_stats: dict[Path, os.stat_result] = {}
        try:
            read_into(
                jobs, threads=self.read_threads, direct=self.direct_reads, read_stats=read_stats
            )
        except IntegrityError as exc:  # truncated or removed between stat and read
            logger.warning("cache entry unreadable, refetching: %s", exc)
            return list(chunks)
        timings["read"] += time.perf_counter() - t0
        trusted = (
            trusted_chunks(store, chunks, read_stats) if self.verify == "marker" else set[str]()
        )
        t0 = time.perf_counter()
        bad = self._verify_parallel([c for c in chunks if c.digest not in trusted], dests)
        timings["verify"] += time.perf_counter() - t0
        for chunk in chunks:
            if chunk in bad:
                logger.warning("cache chunk %s is corrupt; deleted, refetching", chunk.digest)
                store.delete_chunk(chunk.digest)
            elif chunk.digest not in trusted:
                store.mark_verified(chunk.digest, read_stats.get(store.chunk_file(chunk.digest)))
            store.touch(chunk.digest)
        return bad

    def _read_directory_store(
        self,
        store: DirStore,
        chunks: list[ChunkEntry],
        dests: dict[str, memoryview],
        timings: dict[str, float],
    ) -> None:
        """Read chunks from a directory store in place; those without a valid verified marker
        are hashed. The store is only read: a bad chunk is an IntegrityError naming it."""
        jobs = [ReadJob(store.chunk_file(c.digest), 0, dests[c.digest], c.digest) for c in chunks]
        t0 = time.perf_counter()
        read_stats: dict[Path, os.stat_result] = {}
        read_into(jobs, threads=self.read_threads, direct=self.direct_reads, read_stats=read_stats)
        timings["read"] += time.perf_counter() - t0
        trusted = trusted_chunks(store, chunks, read_stats)
        t0 = time.perf_counter()
        bad = self._verify_parallel([c for c in chunks if c.digest not in trusted], dests)
        timings["verify"] += time.perf_counter() - t0
        if bad:
            raise IntegrityError(
                f"chunk {bad[0].digest} in store {store.root} does not match its digest",
                digest=bad[0].digest,
            )

    def _verify_parallel(
        self, chunks: list[ChunkEntry], dests: dict[str, memoryview]
    ) -> list[ChunkEntry]:
        def ok(chunk: ChunkEntry) -> bool:
            try:
                check_chunk(chunk, dests[chunk.digest])
            except IntegrityError:
                return False
            return True

        with ThreadPoolExecutor(
            max_workers=max(1, self.read_threads), thread_name_prefix="thaw-verify"
        ) as ex:
            results = list(ex.map(ok, chunks))
        return [c for c, good in zip(chunks, results, strict=True) if not good]

    def _fetch_missing(
        self,
        manifest: Manifest,
        missing: list[ChunkEntry],
        dests: dict[str, memoryview],
        timings: dict[str, float],
    ) -> int:
        if self.store is None:
            names = ", ".join(c.digest for c in missing)
            raise IntegrityError(
                f"image {manifest.ref}: chunks missing or corrupt and no store: {names}",
                digest=missing[0].digest,
            )
        t0 = time.perf_counter()
        if isinstance(self.store, DirStore):
            # A directory store is on a local disk: its chunks are read in place as the
            # cache's are (its verified markers trusted), never copied into the cache by a
            # restore, which never waits for another process copying them either (a start-up
            # `thaw snapshot pull` does that in the background).
            self._read_directory_store(self.store, missing, dests, timings)
            still = missing
        elif self.cache is None:
            still = missing
            self._fetch_all(still, dests)
        else:
            # The lock makes a concurrent cold start of the same image wait here, then read
            # what this one cached instead of downloading it again.
            with self.cache.image_lock(manifest.ref):
                self.cache.make_room(
                    sum(c.size for c in missing),
                    keep=frozenset(manifest.all_digests()),
                    now=time.time(),
                )
                local, still = self._split(tuple(missing))
                if local:
                    still += self._read_cached(local, dests, timings)
                self._fetch_all(still, dests)
        timings["fetch"] += time.perf_counter() - t0
        return len(still)

    def _fetch_all(
        self, chunks: list[ChunkEntry], dests: dict[str, memoryview], *, tee: bool = True
    ) -> None:
        # Two chunks in flight: one chunk's digest check overlaps the next one's download.
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="thaw-fetch") as ex:
            futures = [ex.submit(self._fetch_one, c, dests[c.digest], tee) for c in chunks]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                # The restore has failed: chunks not started yet are never fetched (a store
                # that refuses every GET is not asked again for each remaining chunk).
                for future in futures:
                    future.cancel()
                raise

    def _fetch_one(self, chunk: ChunkEntry, dest: memoryview, tee: bool = True) -> None:
        """Ranged GETs straight into `dest`, teed into the cache file (unless `tee` is off);
        published only if valid."""
        if self.store is None:
            raise SnapshotError("no store configured")
        fill = self.cache.begin_fill(chunk.digest, chunk.size) if self.cache and tee else None
        digest = OrderedDigest(dest)

        def landed(offset: int, nbytes: int) -> None:
            if fill is not None:
                fill.write(offset, dest[offset : offset + nbytes])
            digest.landed(offset, nbytes)

        try:
            self.store.read_chunk_into(chunk.digest, dest, on_bytes=landed)
            got = digest.hexdigest()
            if got is None:  # the store did not report every piece: hash it all now
                check_chunk(chunk, dest)
            elif got != chunk.digest:
                raise IntegrityError(
                    f"chunk {chunk.digest} does not match its digest", digest=chunk.digest
                )
        except BaseException:
            if fill is not None:
                fill.abort()
            raise
        if fill is not None:
            fill.commit()


def _side_blobs(manifest: Manifest) -> tuple[dict[str, memoryview], list[ChunkEntry]]:
    """Fresh host memory for the image's artifacts and model files, each digest once.

    Mapped, not allocated: a size is only the manifest's claim until the store's bytes match
    it, so memory is touched only as bytes land, and a claim no memory can hold (a manifest
    saying 1 TB) is a SnapshotError (the model then loads its files) instead of MemoryError."""
    dests: dict[str, memoryview] = {}
    for entry in (*manifest.artifacts.values(), *manifest.files.values()):
        if entry.digest not in dests:
            dests[entry.digest] = Arena(entry.size).memoryview(0, entry.size)
    entries = {e.digest: e for e in (*manifest.artifacts.values(), *manifest.files.values())}
    return dests, list(entries.values())


def _views(manifest: Manifest, arena: Arena) -> dict[str, np.ndarray]:
    bases = manifest.chunk_bases
    return {
        t.name: arena.view(bases[t.chunk] + t.offset, t.nbytes, t.dtype, t.shape)
        for t in manifest.tensors
    }
