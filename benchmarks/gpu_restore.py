"""The device check's restore rows: pinned H2D, images restored into VRAM beside it (from the
page cache and from the host tier), and a sharded checkpoint beside a single-file image."""

from __future__ import annotations

import gc
import os
import shutil
from pathlib import Path
from typing import Any

from benchmarks import gpu_models
from benchmarks.gpu_row import Row
from benchmarks.gpu_warm_process import (
    DEVICE,
    best_of,
    ring_loader,
    timed,
    warm_page_cache,
    warm_pool,
)


def h2d_rows(torch: Any, state: dict[str, Any]) -> list[Row]:
    n = 1 << 30
    dev = torch.empty(n, dtype=torch.uint8, device=DEVICE)
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    pageable = torch.empty(n, dtype=torch.uint8)
    best = min(timed(torch, lambda: dev.copy_(pinned, non_blocking=True))[0] for _ in range(5))
    slow = min(timed(torch, lambda: dev.copy_(pageable))[0] for _ in range(2))
    state["h2d"] = n / best / 1e9
    return [
        Row("pinned H2D, 1 GiB (best of 5)", f"{state['h2d']:.1f} GB/s", "the ceiling"),
        Row("pageable H2D, 1 GiB (best of 2)", f"{n / slow / 1e9:.1f} GB/s", "for reference"),
    ]


def _warm_images(cache: Path, refs: list[Any]) -> None:
    from snapshotter import ImageLoader
    from snapshotter.stores.dir_store import DirStore

    store = DirStore(cache)
    for ref in refs:
        for chunk in ImageLoader(None, cache, "cpu").manifest(ref).chunks:
            with store.chunk_file(chunk.digest).open("rb") as f:
                while f.read(64 << 20):
                    pass


def pinned_h2d(torch: Any, state: dict[str, Any]) -> float:
    """Pinned H2D GB/s of this run: measured by the "pinned H2D" step, or now (`--steps`)."""
    if "h2d" not in state:
        h2d_rows(torch, state)
    return float(state["h2d"])


def restore_rows(torch: Any, state: dict[str, Any], work: Path, sizes: list[float]) -> list[Row]:
    from snapshotter import ImageRef

    h2d = pinned_h2d(torch, state)
    cache = work / "cache"
    for gib in sizes:
        gpu_models.weights_image(cache, work, f"w{gib:g}g", gib, target="cpu")
    warm_page_cache(cache)
    # What a CUDA-ready warm process holds: a pre-pinned ring and a reserved device pool.
    pool = warm_pool()
    reserve = torch.empty(
        int(max(sizes) * (1 << 30)) + (64 << 20), dtype=torch.uint8, device=DEVICE
    )
    del reserve
    rows = []
    for gib in sizes:
        ref = ImageRef(f"w{gib:g}g", "1", "cpu")
        loader = ring_loader(cache, "cpu", pool)
        first, image = timed(torch, lambda: loader.restore(ref, device=DEVICE))  # noqa: B023
        del image
        gc.collect()
        seconds, image = best_of(torch, 2, lambda: loader.restore(ref, device=DEVICE))  # noqa: B023
        seconds = min(seconds, first)
        gbps = image.manifest.arena_bytes / seconds / 1e9
        share = gbps / h2d
        rows.append(
            Row(
                f"restore {gib:g} GiB image -> VRAM (page cache warm, best of 3)",
                f"{gbps:.1f} GB/s ({seconds:.3f} s; first {first:.3f} s)",
                f"{share:.0%} of pinned H2D",
                "ok (>= 80%)" if share >= 0.8 else "below goal (80%)",
            )
        )
        if gib == sizes[0]:
            rows.append(_bytes_match(torch, loader, cache, ref, image))
        del image
        gc.collect()
    rows.append(_host_tier_row(torch, cache, sizes[-1], pool, state))
    return rows


def _bytes_match(torch: Any, loader: Any, cache: Path, ref: Any, image: Any) -> Row:
    from snapshotter import ImageLoader

    host = ImageLoader(None, cache, "cpu").restore(ref).torch_tensors()
    names = sorted(host)[:: max(1, len(host) // 8)]
    # Bytes, not values: random fp16 weights hold NaNs, and NaN != NaN.
    same = all(
        torch.equal(_raw(torch, image.torch_tensors()[n].cpu()), _raw(torch, host[n]))
        for n in names
    )
    return Row(
        "restored VRAM bytes == CPU restore",
        f"{len(names)} sampled tensors",
        "CPU restore",
        "ok" if same else "MISMATCH",
        ok=same,
    )


def _raw(torch: Any, tensor: Any) -> Any:
    """A tensor's bytes as a flat uint8 tensor."""
    return tensor.reshape(-1).view(torch.uint8)


def host_tier_dir(nbytes: int) -> tuple[Path, str | None]:
    """A fresh host-tier directory on /dev/shm (a tmpfs, as `thaw up` uses), and why it cannot
    hold `nbytes` (None when it can)."""
    tier = Path("/dev/shm") / f"thaw-gpu-check-{os.getpid()}"
    tier.mkdir(mode=0o700, exist_ok=True)
    free = shutil.disk_usage(tier).free
    if free < nbytes + (64 << 20):
        return (
            tier,
            f"/dev/shm has {free / 2**30:.1f} GiB free, the image needs {nbytes / 2**30:.1f}",
        )
    return tier, None


def _host_tier_row(torch: Any, cache: Path, gib: float, pool: Any, state: dict[str, Any]) -> Row:
    from snapshotter import ImageLoader, ImageRef

    ref = ImageRef(f"w{gib:g}g", "1", "cpu")
    label = f"restore {gib:g} GiB from the host tier (read from tmpfs, through the pinned ring)"
    nbytes = ImageLoader(None, cache, "cpu").manifest(ref).arena_bytes
    tier, no_room = host_tier_dir(nbytes)
    try:
        if no_room is not None:
            return Row(label, f"skipped: {no_room}", skipped=no_room, hardware=True)

        def loader() -> Any:
            return ring_loader(cache, "cpu", pool, host_cache_dir=tier, host_max_bytes=1 << 40)

        if not loader().keep_in_host_tier(ref):  # what a restore publishes in the background
            return Row(label, "FAILED: the host tier did not keep the image", ok=False)
        fresh = loader()  # another process's loader: it maps the kept file
        seconds, image = timed(torch, lambda: fresh.restore(ref, device=DEVICE))
    finally:
        shutil.rmtree(tier, ignore_errors=True)
    gbps = image.manifest.arena_bytes / seconds / 1e9
    goal = 0.5 * gib / 16 if gib < 16 else 0.5
    verdict = "ok" if seconds <= goal and image.source == "host" else f"above goal ({goal:.2f} s)"
    return Row(
        label,
        f"{seconds:.3f} s ({gbps:.1f} GB/s, from={image.source})",
        f"{gbps / pinned_h2d(torch, state):.0%} of pinned H2D",
        verdict,
        ok=image.source == "host",
    )


def sharded_rows(
    torch: Any, work: Path, sizes: list[float], *, single_gib: float = 1.0
) -> list[Row]:
    """An LLM-shaped image (numbered shards, index, tokenizer files: `sharded_set`) restored
    into VRAM through the pinned ring, beside the 1 GiB single-file image in the same step:
    the largest size up to 8 GiB, 8 shards per GiB (a 7-8B model's 4-5 GB shards are bigger;
    more, smaller shards are the harder case for per-file costs)."""
    import threading

    from benchmarks.sharded_set import TOKENIZER_FILES, write_checkpoint
    from snapshotter import ImageRef, build_image
    from snapshotter.staging_ring import pread_piece
    from snapshotter.stores.dir_store import DirStore

    gib = min(8.0, max(sizes))
    shards = max(8, int(gib * 8))
    cache, name = work / "cache", f"llm{gib:g}g{shards}"
    single_name = f"w{single_gib:g}g"
    gpu_models.weights_image(cache, work, single_name, single_gib, target="cpu")
    version = work / "repo" / name / "1"
    if not (work / f"{name}.built").exists():
        write_checkpoint(version, gib, shards=shards)
        build_image(version, DirStore(cache), hash_threads=max(2, (os.cpu_count() or 2) // 2))
        for shard in version.glob("*.safetensors"):
            shard.unlink()  # the image holds them; the tokenizer files stay to compare
        (work / f"{name}.built").touch()
    single_ref, sharded_ref = ImageRef(single_name, "1", "cpu"), ImageRef(name, "1", "cpu")
    _warm_images(cache, [single_ref, sharded_ref])  # these two only, not every size's image
    pool = warm_pool()
    read_bytes, lock = [0], threading.Lock()

    def counted(job: Any, offset: int, view: memoryview) -> None:
        pread_piece(job, offset, view)  # the ring's own reader, counted
        with lock:
            read_bytes[0] += len(view)

    def restore(ref: Any) -> tuple[float, Any]:
        read_bytes[0] = 0
        loader = ring_loader(cache, "cpu", pool, device_read=counted)
        seconds, image = timed(torch, lambda: loader.restore(ref, device=DEVICE))
        return image.manifest.arena_bytes / seconds / 1e9, image

    single, image = restore(single_ref)
    del image  # the VRAM back before the big one
    gc.collect()
    sharded, image = restore(sharded_ref)
    ratio = sharded / single
    through_ring = read_bytes[0] == image.manifest.arena_bytes
    same = _bytes_match(torch, ring_loader(cache, "cpu", pool), cache, image.ref, image).ok
    files = image.files_dir is not None and all(
        (image.files_dir / f).read_bytes() == (version / f).read_bytes() for f in TOKENIZER_FILES
    )
    del image
    gc.collect()
    return [
        Row(
            f"restore {gib:g} GiB sharded checkpoint ({shards} shards + tokenizer) -> VRAM",
            f"{sharded:.1f} GB/s",
            f"{single_gib:g} GiB single-file image: {single:.1f} GB/s ({ratio:.0%})",
            "ok (within 10%)" if ratio >= 0.9 else "below goal (within 10%)",
        ),
        Row(
            "sharded restore: every byte through the pinned ring, == CPU, tokenizer on disk",
            f"ring read {read_bytes[0] / 2**30:.2f} GiB; bytes match: {same}; files: {files}",
            "CPU restore",
            "ok" if through_ring and same and files else "MISMATCH",
            ok=through_ring and same and files,
        ),
    ]
