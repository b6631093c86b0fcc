"""Scaler backend that runs each replica as a local `thaw serve` process."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

import aiohttp

from activator.config import ActivatorConfig
from activator.errors import ActivationFailed
from activator.scaler.backend import StartedReplica
from activator.scaler.replica_process import ReplicaProcess
from activator.warm_pool import WarmPool

__all__ = ["LocalBackend", "arena_with_headroom", "replica_argv"]

logger = logging.getLogger(__name__)

_MAX_ARENA_BYTES = 1 << 44  # what `thaw serve --arena-bytes` accepts

REFILL_DELAY_S = 1.0
"""After a replica loaded, how long its pool's refill waits (its first inferences run alone)."""


def arena_with_headroom(nbytes: int) -> int:
    """`nbytes` of model files plus room for the image layout's 4 KiB alignment of every tensor
    (an image of a model with many small tensors is larger than its files: resnet50's by
    ~100 KiB); an arena too small for the image is not used and the restore pays fresh page
    faults instead."""
    return min(nbytes + nbytes // 64 + (4 << 20), _MAX_ARENA_BYTES)


def replica_argv(config: ActivatorConfig, *, pooled: bool) -> list[str]:
    """The command line of one runtime replica (explicit control mode, no model loaded)."""
    argv = [*config.serve_command, str(config.repository), "--host", "127.0.0.1"]
    argv += ["--port", "0", "--model-control-mode", "explicit"]
    argv += ["--log-level", config.replica_log_level]
    if config.cache_dir is not None:
        argv += ["--cache", str(config.cache_dir)]
    if config.store is not None:
        argv += ["--store", config.store]
    if pooled and config.preload_frameworks:
        argv += ["--preload-frameworks", ",".join(config.preload_frameworks)]
    if pooled and config.arena_bytes > 0:
        argv += ["--arena-bytes", str(arena_with_headroom(config.arena_bytes))]
    return argv


class LocalBackend:
    """Replicas are child processes: claimed from the warm pool (or started), then loaded."""

    def __init__(self, config: ActivatorConfig, session: aiohttp.ClientSession) -> None:
        self._config = config
        self._session = session
        self._procs: dict[str, ReplicaProcess] = {}
        self._ids = itertools.count(1)
        self.pool: WarmPool | None = None
        if config.warm_pool > 0:
            self.pool = WarmPool(
                config.warm_pool,
                lambda: replica_argv(config, pooled=True),
                session,
                start_timeout_s=config.replica_start_timeout_s,
            )
            self.pool.refill()

    async def start_replica(self, model: str, *, timeout_s: float) -> StartedReplica:
        start = time.monotonic()
        deadline = start + timeout_s
        proc = self.pool.claim() if self.pool is not None else None
        refill_delay_s = 0.0  # a failed start refills at once
        try:
            if proc is None:
                argv = replica_argv(self._config, pooled=False)
                proc = await ReplicaProcess.spawn(argv, f"{model}-fresh")
                await proc.wait_ready(self._session, deadline)
            claimed = time.monotonic()
            await proc.load(self._session, model, max(0.01, deadline - claimed))
            refill_delay_s = REFILL_DELAY_S
        except BaseException as exc:
            if proc is not None:
                await proc.stop(self._config.drain_timeout_s)
            if isinstance(exc, OSError):
                raise ActivationFailed(f"could not start a replica for '{model}': {exc}") from exc
            raise
        finally:
            if self.pool is not None:  # after the load and the first inferences, see refill()
                self.pool.refill(delay_s=refill_delay_s)
        replica_id = f"{model}-{next(self._ids)}"
        proc.name = replica_id
        self._procs[replica_id] = proc
        logger.info("replica %s model=%s serving at %s", replica_id, model, proc.url)
        return StartedReplica(
            replica_id,
            model,
            proc.url,
            claim_s=claimed - start,
            restore_s=time.monotonic() - claimed,
            pid=proc.proc.pid,
        )

    async def wait_lost(self, replica_id: str) -> str:
        proc = self._procs.get(replica_id)
        if proc is None:
            return "stopped"
        code = await proc.proc.wait()
        tail = proc.stderr_tail(4)
        return f"exit code {code}" + (f": {tail}" if tail else "")

    async def stop_replica(self, replica_id: str, *, timeout_s: float) -> None:
        proc = self._procs.pop(replica_id, None)
        if proc is not None:
            code = await proc.stop(timeout_s)
            logger.info("replica %s stopped (exit code %s)", replica_id, code)

    async def close(self) -> None:
        procs = list(self._procs)
        await asyncio.gather(
            *(self.stop_replica(r, timeout_s=self._config.drain_timeout_s) for r in procs)
        )
        if self.pool is not None:
            await self.pool.close()
