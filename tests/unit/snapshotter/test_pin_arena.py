"""Page-locking the restore arena: a failed cudaHostRegister clears CUDA's error and falls back."""

from __future__ import annotations

import gc

from snapshotter.arena import Arena
from snapshotter.cuda_copier import register_arena


class FakeCudart:
    """torch.cuda.cudart()'s calls pinning makes, with CUDA's per-thread last error."""

    def __init__(self, register_result: int) -> None:
        self.register_result = register_result
        self.last_error = 0
        self.registered: list[tuple[int, int]] = []
        self.unregistered: list[int] = []

    def cudaHostRegister(self, ptr: int, nbytes: int, flags: int) -> int:
        if self.register_result != 0:
            self.last_error = self.register_result  # what the CUDA runtime does
            return self.register_result
        self.registered.append((ptr, nbytes))
        return 0

    def cudaHostUnregister(self, ptr: int) -> int:
        self.unregistered.append(ptr)
        return 0

    def cudaGetLastError(self) -> int:
        error, self.last_error = self.last_error, 0
        return error


def test_a_failed_registration_clears_cudas_last_error_and_says_no() -> None:
    cudart = FakeCudart(register_result=1)  # cudaErrorInvalidValue
    arena = Arena(1 << 16)
    assert register_arena(arena, cudart) is False
    assert cudart.last_error == 0  # the next kernel launch will not inherit it
    assert cudart.registered == []


def test_a_registration_is_done_once_and_undone_when_the_arena_is_freed() -> None:
    cudart = FakeCudart(register_result=0)
    arena = Arena(1 << 16)
    assert register_arena(arena, cudart) and register_arena(arena, cudart)
    assert len(cudart.registered) == 1
    ptr = cudart.registered[0][0]
    del arena
    gc.collect()
    assert cudart.unregistered == [ptr]


def test_without_a_binding_for_it_the_error_is_cleared_through_the_library() -> None:
    cleared: list[int] = []

    class NoLastError(FakeCudart):
        cudaGetLastError = None  # type: ignore[assignment]  # torch's binding lacks it

    def last_error() -> int:
        cleared.append(1)
        return 0

    assert register_arena(Arena(1 << 16), NoLastError(2), last_error=last_error) is False
    assert cleared == [1]
