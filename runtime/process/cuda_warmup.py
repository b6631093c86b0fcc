"""A CUDA-ready warm process: contexts, device memory pools and pinned staging before ready.

Run as one of `thaw serve`'s warm-ups (runtime.models.lifecycle), in a thread, before
`/v2/health/ready` answers 200 — so a model assigned to this process later pays none of it:

- the CUDA context of every GPU named by `--cuda-memory-pool-byte-size <gpu>:<bytes>` (when
  none is named, of every GPU `--target` found: runtime.devices.target), created by reserving
  that much device memory through torch's caching allocator: allocated once, then freed back
  to the allocator, which keeps it reserved, so a restore's device arena of up to that size
  is carved out of it with no `cudaMalloc`;
- the pinned host staging ring (`--pinned-memory-pool-byte-size`) every restore to a GPU copies
  through (`snapshotter.StagingPool`), instead of pinning its own on the critical path;
- the pre-faulted restore arena (`--arena-bytes`) page-locked, so weights restored into it on
  the host and copied to a GPU by the framework itself (onnxruntime's CUDA EP without DLPack
  device initializers) copy at PCIe speed. (Restores into a GPU copy through the staging ring,
  also from the shared host tier, whose mapping is never page-locked: docs/gpu.md.)

Without CUDA it logs why, counts `thaw_device_fallbacks_total{model="",reason="no_cuda"}` and
returns: the server comes up CPU-only. A pool that does not fit fails the start (exit 1), as a
misconfigured GPU should be loud.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from runtime.config import ServeConfig
from runtime.devices.plan import FallbackReason
from runtime.errors import ServingError
from runtime.observe.metrics import Metrics

if TYPE_CHECKING:
    from snapshotter import Arena, StagingPool

__all__ = ["CudaWarmup", "staging_shape"]

logger = logging.getLogger(__name__)

# The slot size of the fastest ring measured on an H200 (snapshotter.cuda_restore.DeviceConfig).
SLOT_BYTES = 32 << 20


def staging_shape(pinned_bytes: int, slot_bytes: int = SLOT_BYTES) -> tuple[int, int]:
    """(slot bytes, slots) of a staging ring of about `pinned_bytes`: 32 MiB slots, fewer
    bytes per slot for a smaller pool, at least two slots so reads and copies overlap."""
    slot = min(slot_bytes, max(1, pinned_bytes // 2))
    return slot, max(2, pinned_bytes // slot)


class CudaWarmup:
    """The warm-up above; `staging` is the pool restores use (None without the flag)."""

    def __init__(
        self,
        config: ServeConfig,
        *,
        metrics: Metrics,
        arena: Arena | None,
        gpus: tuple[int, ...] = (0,),
    ) -> None:
        # Without pools named, a context on each GPU the target found (Triton creates one per
        # GPU too), reserving nothing.
        self._pools = config.cuda_memory_pools or tuple((gpu, 0) for gpu in gpus or (0,))
        self._metrics = metrics
        self._arena = arena
        self.staging: StagingPool | None = None
        self.ready = False
        if config.pinned_memory_pool_bytes:
            from snapshotter import StagingPool

            slot, slots = staging_shape(config.pinned_memory_pool_bytes)
            self.staging = StagingPool(slot_bytes=slot, slots=slots)

    def run(self) -> None:
        """Blocking; the lifecycle runs it in a thread before the server reports ready."""
        from snapshotter import cuda_available

        ok, why = cuda_available()
        if not ok:
            logger.warning("CUDA warm-up skipped: %s; this server runs models on CPU", why)
            self._metrics.record_device_fallback("", FallbackReason.NO_CUDA.value)
            return
        started = time.perf_counter()
        for gpu, nbytes in self._pools:
            self._reserve(gpu, nbytes)
        self._pin_host_memory(self._pools[0][0])
        self.ready = True
        logger.info("CUDA ready in %.2fs: pools %s, pinned staging %d bytes",
                    time.perf_counter() - started, dict(self._pools),
                    self.staging.nbytes if self.staging else 0)  # fmt: skip

    def _reserve(self, gpu: int, nbytes: int) -> None:
        import torch

        if gpu >= torch.cuda.device_count():
            raise ServingError(
                f"--cuda-memory-pool-byte-size {gpu}:{nbytes}: GPU {gpu} does not exist here "
                f"({torch.cuda.device_count()} GPU(s))"
            )
        device = f"cuda:{gpu}"
        try:
            block = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
        except torch.cuda.OutOfMemoryError as exc:
            raise ServingError(
                f"--cuda-memory-pool-byte-size {gpu}:{nbytes}: {device} cannot reserve it: {exc}"
            ) from exc
        torch.cuda.synchronize(device)
        del block  # back to torch's caching allocator, which keeps the segment reserved
        self._metrics.cuda_pool_bytes.labels(str(gpu)).set(nbytes)

    def _pin_host_memory(self, gpu: int) -> None:
        from snapshotter.cuda_copier import TorchCudaCopier, pin_arena

        if self.staging is not None:
            self.staging.allocate(TorchCudaCopier(f"cuda:{gpu}"))
        if self._arena is not None and not pin_arena(self._arena):
            logger.warning("the restore arena (%d bytes) could not be pinned; weights copied "
                           "out of it to a GPU copy at pageable speed",
                           self._arena.nbytes)  # fmt: skip
