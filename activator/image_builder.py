"""Builds each model's snapshot image into the cache at start-up, in the background.

Runs `thaw snapshot build MODEL_DIR --store CACHE_DIR` as a subprocess per model, one at a
time, never blocking serving. A failed or missing snapshotter is logged; replicas then load
the model files normally.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["build_images"]

logger = logging.getLogger(__name__)

# `thaw snapshot build` exits 3 for a model without weight files (a Python model): not a failure.
_NOTHING_TO_IMAGE_EXIT = 3


async def build_images(
    command: Sequence[str], model_dirs: Sequence[Path], cache_dir: Path, *, timeout_s: float
) -> dict[str, str]:
    """Build every image; returns model -> "ok" or the reason it failed (for status)."""
    results: dict[str, str] = {}
    for model_dir in model_dirs:
        results[model_dir.name] = await _build_one(command, model_dir, cache_dir, timeout_s)
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
