"""Prefetch the images of hot models into a node-local cache (the cache DaemonSet's one job).

A model is hot when its `thaw.hot` setting is true (config.pbtxt, or the chart's models
ConfigMap through `--model-settings`). Each pass pulls every hot model's image from the store
into the cache with `thaw snapshot pull` subprocesses (the snapshotter's own verified copy:
chunks checked against their digests, written atomically, so runtime pods restoring from the
same cache at the same time never read a partial image). A pull that fails is retried on the
next pass; the activator imports no snapshotter code.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from activator.fleet.repository import Repository

__all__ = ["PullResult", "hot_models", "prefetch_once"]

logger = logging.getLogger(__name__)

_MAX_STDERR = 2000


@dataclass(frozen=True)
class PullResult:
    """One model's pull: `ok`, and the snapshotter's last words when not."""

    model: str
    ok: bool
    detail: str = ""


def hot_models(repository: Repository) -> list[str]:
    """The repository's models whose `thaw.hot` setting is on, by name."""
    return [name for name in repository.names() if repository.get(name).settings.hot]


async def prefetch_once(
    command: Sequence[str],
    models: Sequence[str],
    *,
    store: str,
    cache: Path,
    target: str,
    timeout_s: float,
) -> list[PullResult]:
    """Pull each of `models` into `cache`, one at a time (a node's disk and network are
    shared with the runtime pods restoring from it)."""
    results = []
    for model in models:
        argv = [*command, "snapshot", "pull", model, "--store", store]
        argv += ["--cache", str(cache), "--target", target]
        results.append(await _pull(model, argv, timeout_s))
    return results


async def _pull(model: str, argv: list[str], timeout_s: float) -> PullResult:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    try:
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        logger.warning("model=%s image pull timed out after %g s", model, timeout_s)
        return PullResult(model, False, f"timed out after {timeout_s:g} s")
    except asyncio.CancelledError:
        proc.kill()
        await proc.wait()
        raise
    text = stderr.decode(errors="replace").strip()[-_MAX_STDERR:]
    if proc.returncode == 0:
        logger.info("model=%s image in the node cache", model)
        return PullResult(model, True)
    logger.warning("model=%s image pull failed: %s", model, text)
    return PullResult(model, False, text)
