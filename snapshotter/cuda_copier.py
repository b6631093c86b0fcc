"""The CUDA `DeviceCopier`: device buffers, pinned host memory and async copies, through torch.

Written against `torch.cuda` (Stream, Event, `Tensor.copy_(non_blocking=True)`,
`torch.empty(..., pin_memory=True)`, `mem_get_info`, `cudart().cudaHostRegister`); torch is
imported only when a copier is made, so CPU machines never touch CUDA. Every CUDA failure is
translated here, once: out of memory -> DeviceMemoryError, any other CUDA error ->
DeviceCopyError. Runs only where a GPU exists (tests/gpu, benchmarks/gpu_check.py).
"""

from __future__ import annotations

import ctypes
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from snapshotter.arena import Arena
from snapshotter.device_budget import DeviceMemory
from snapshotter.errors import DeviceCopyError, DeviceMemoryError, SnapshotError

__all__ = ["TorchCudaCopier", "cuda_available", "pin_arena", "register_arena"]

logger = logging.getLogger(__name__)

# cudaHostRegisterPortable: pinned for every CUDA context of the process, not just this one's.
_REGISTER_PORTABLE = 1
# Arenas this process has page-locked: registration is per process, and registering the same
# range twice is a CUDA error. Weak: an arena that is freed leaves (and is unregistered first).
_PINNED: weakref.WeakSet[Arena] = weakref.WeakSet()
_PIN_LOCK = threading.Lock()


def cuda_available() -> tuple[bool, str]:
    """Whether this process can use CUDA, and if not, why (for the fallback's log line)."""
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        if torch.version.cuda:
            return False, "no CUDA device visible"
        return False, f"torch {torch.__version__} is built without CUDA"
    return True, ""


class _Pinned:
    """A torch CPU tensor a copy reads, and its bytes (pinned when `pinned()` made it)."""

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor
        self.view = memoryview(tensor.numpy()).cast("B")


class _Done:
    def __init__(self, event: Any, device: str) -> None:
        self._event, self._device = event, device

    def wait(self) -> None:
        try:
            self._event.synchronize()
        except RuntimeError as exc:  # torch surfaces CUDA errors as RuntimeError subclasses
            raise DeviceCopyError(f"copy to {self._device} failed: {exc}") from exc


class TorchCudaCopier:
    """Copies into one CUDA device on one stream of its own."""

    def __init__(self, device: str) -> None:
        import torch

        ok, why = cuda_available()
        if not ok:
            raise SnapshotError(f"target device {device}: {why}")
        self._torch = torch
        self.device = str(torch.device(device))
        self._stream = torch.cuda.Stream(device=self.device)

    def allocate(self, nbytes: int) -> Any:
        torch = self._torch
        try:
            return torch.empty(max(nbytes, 1), dtype=torch.uint8, device=self.device)
        except torch.cuda.OutOfMemoryError as exc:
            raise DeviceMemoryError(
                f"{self.device} ran out of memory allocating {nbytes} bytes: {exc}"
            ) from exc

    def pinned(self, nbytes: int) -> _Pinned:
        torch = self._torch
        try:
            return _Pinned(torch.empty(max(nbytes, 1), dtype=torch.uint8, pin_memory=True))
        except RuntimeError as exc:
            raise DeviceMemoryError(f"cannot pin {nbytes} bytes of host memory: {exc}") from exc

    def wrap_host(self, view: memoryview) -> _Pinned:
        """Host memory as a copy source, as it is: page-locked only if it was registered
        beforehand (`pin_arena`); otherwise the driver stages the copy (pageable speed)."""
        return _Pinned(self._torch.frombuffer(view, dtype=self._torch.uint8))

    def copy(self, src: Any, src_offset: int, nbytes: int, dst: Any, dst_offset: int) -> _Done:
        torch = self._torch
        try:
            with torch.cuda.stream(self._stream):
                dst[dst_offset : dst_offset + nbytes].copy_(
                    src.tensor[src_offset : src_offset + nbytes], non_blocking=True
                )
                event = torch.cuda.Event()
                event.record(self._stream)
        except RuntimeError as exc:
            raise DeviceCopyError(f"copy to {self.device} failed to start: {exc}") from exc
        return _Done(event, self.device)

    def synchronize(self) -> None:
        try:
            self._stream.synchronize()
        except RuntimeError as exc:
            raise DeviceCopyError(f"copies to {self.device} failed: {exc}") from exc

    def memory(self, device: str) -> DeviceMemory:
        """`cudaMemGetInfo` + what torch's caching allocator holds reserved but unused."""
        torch = self._torch
        free, total = torch.cuda.mem_get_info(device)
        reusable = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return DeviceMemory(free_bytes=free, total_bytes=total, reusable_bytes=max(0, reusable))


def pin_arena(arena: Arena) -> bool:
    """Page-lock a host arena for CUDA (`cudaHostRegister`), so copies out of it run at pinned
    speed and asynchronously; unregistered when the arena is freed. False when CUDA is not here
    or the registration failed (copies then still work, staged by the driver, slower)."""
    ok, _ = cuda_available()
    if not ok or arena.nbytes == 0:
        return False
    import torch

    return register_arena(arena, torch.cuda.cudart())


def register_arena(
    arena: Arena, cudart: Any, *, last_error: Callable[[], int] | None = None
) -> bool:
    """`pin_arena` through `cudart` (torch's binding, or a test's). A failed registration also
    clears CUDA's last error (`cudaGetLastError`, through `last_error` or the process's loaded
    libcudart): left set, the next kernel launch that checks it (torch checks after every
    launch) would fail with this unrelated error."""
    with _PIN_LOCK:
        if arena in _PINNED:
            return True
        ptr = int(arena.array.ctypes.data)
        code = int(cudart.cudaHostRegister(ptr, arena.nbytes, _REGISTER_PORTABLE))
        if code != 0:
            cleared = _clear_last_error(cudart, last_error)
            note = "" if cleared else "; CUDA's last error could not be cleared"
            logger.warning("cudaHostRegister of %d bytes failed (CUDA error %d%s); copies "
                           "out of this arena run at pageable speed", arena.nbytes, code,
                           note)  # fmt: skip
            return False
        _PINNED.add(arena)
        weakref.finalize(arena, cudart.cudaHostUnregister, ptr)
    return True


def _clear_last_error(cudart: Any, last_error: Callable[[], int] | None) -> bool:
    """Reset this thread's CUDA last error; False when no `cudaGetLastError` could be found."""
    fn = last_error or getattr(cudart, "cudaGetLastError", None) or _loaded_cudart_last_error()
    if fn is None:
        return False
    fn()
    return True


def _loaded_cudart_last_error() -> Callable[[], int] | None:
    """`cudaGetLastError` of the libcudart this process has already loaded (torch's), found in
    /proc/self/maps: the same library, so the same per-thread error state."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libcudart.so" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            return ctypes.CDLL(path).cudaGetLastError
        except (OSError, AttributeError):
            continue
    return None
