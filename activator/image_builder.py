"""Builds each model's snapshot image into the cache at start-up, in the background.

Runs `thaw snapshot build MODEL_DIR --store CACHE_DIR` as a subprocess per model, one at a
time, never blocking serving. Progress goes to the log (`image build 2/5 ...`, then a summary
line) and to `on_state` (model, "building" | the result), which the status document shows. A
failed or missing snapshotter is logged; replicas then load the model files normally.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["build_images"]

logger = logging.getLogger(__name__)

# `thaw snapshot build` exits 3 for a model without weight files (a Python model): not a failure.
_NOTHING_TO_IMAGE_EXIT = 3


async def build_images(
    command: Sequence[str],
    model_dirs: Sequence[Path],
    cache_dir: Path,
    *,
    timeout_s: float,
    on_state: Callable[[str, str], None] | None = None,
) -> dict[str, str]:
    """Build every image; returns model -> "ok" or the reason it failed (for status).
    `on_state(model, state)` hears "building" as each starts and its result as it ends."""
    results: dict[str, str] = {}
    report = on_state or (lambda _model, _state: None)
    start, total = time.monotonic(), len(model_dirs)
    for n, model_dir in enumerate(model_dirs, 1):
        logger.info("model=%s image build %d/%d started", model_dir.name, n, total)
        report(model_dir.name, "building")
        result = await _build_one(command, model_dir, cache_dir, timeout_s)
        results[model_dir.name] = result
        report(model_dir.name, result)
    if total:
        kinds = Counter(r.split(":")[0] for r in results.values())
        summary = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
        logger.info(
            "image builds done: %d/%d in %.1f s (%s)", total, total, time.monotonic() - start,
            summary,
        )  # fmt: skip
    return results


async def _build_one(
    command: Sequence[str], model_dir: Path, cache_dir: Path, timeout_s: float
) -> str:
    argv = [*command, "snapshot", "build", str(model_dir), "--store", str(cache_dir)]
    start = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        logger.warning("model=%s image build could not start: %s", model_dir.name, exc)
        return f"could not start: {exc}"
    try:
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout_s)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        logger.warning("model=%s image build stopped (timeout or shutdown)", model_dir.name)
        return "timed out"
    if proc.returncode == _NOTHING_TO_IMAGE_EXIT:
        logger.info("model=%s has no weight files to image; it loads normally", model_dir.name)
        return "skipped: nothing to image"
    if proc.returncode != 0:
        tail = stderr.decode(errors="replace").strip().splitlines()[-3:]
        reason = " | ".join(tail) or f"exit code {proc.returncode}"
        logger.warning("model=%s image build failed; normal loads: %s", model_dir.name, reason)
        return f"failed: {reason}"
    logger.info("model=%s image built in %.2f s", model_dir.name, time.monotonic() - start)
    return "ok"
