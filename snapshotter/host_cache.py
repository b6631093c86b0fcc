"""The host-memory tier: recently restored arenas kept for a retention so a re-warm is one copy."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from snapshotter.arena import Arena
from snapshotter.image_ref import ImageRef

logger = logging.getLogger(__name__)

Clock = Callable[[], float]
Pinner = Callable[[Arena], bool]
"""Page-locks an arena for CUDA (`cuda_copier.pin_arena`); False when it could not."""


@dataclass
class HostEntry:
    """One kept image: its arena, size and when it was last restored (clock seconds)."""

    ref: ImageRef
    manifest_digest: str
    arena: Arena
    last_used: float


def plan_expiry(
    entries: list[HostEntry], *, now: float, retention_s: float, max_bytes: int
) -> list[HostEntry]:
    """Entries to drop: older than `retention_s`, then least recently used over `max_bytes`."""
    expired = [e for e in entries if now - e.last_used > retention_s]
    alive = sorted((e for e in entries if e not in expired), key=lambda e: e.last_used)
    total = sum(e.arena.nbytes for e in alive)
    while alive and total > max_bytes:
        victim = alive.pop(0)
        expired.append(victim)
        total -= victim.arena.nbytes
    return expired


def pin_for_cuda(arena: Arena, pinner: Pinner | None) -> bool:
    """Pin a host-tier arena when the target is CUDA (`pinner` given), so a wake from the tier
    is one host-to-device copy at PCIe speed; unpinned when the arena is freed. False (logged)
    when there is no pinner or pinning failed: the copy then runs at pageable speed."""
    if pinner is None:
        return False
    if pinner(arena):
        return True
    logger.info("host tier arena of %d bytes not pinned: copies from it run at pageable speed",
                arena.nbytes)  # fmt: skip
    return False


class HostCache:
    """Keeps up to `max_bytes` of restored arenas for `retention_s` seconds of `clock`."""

    def __init__(self, *, retention_s: float, max_bytes: int, clock: Clock) -> None:
        self.retention_s, self.max_bytes, self._clock = retention_s, max_bytes, clock
        self._entries: dict[ImageRef, HostEntry] = {}
        self._lock = threading.Lock()  # restores run in worker threads

    def get(self, ref: ImageRef, manifest_digest: str) -> Arena | None:
        """The kept arena for this exact manifest, refreshing its retention, or None."""
        with self._lock:
            self._expire()
            entry = self._entries.get(ref)
            if entry is None or entry.manifest_digest != manifest_digest:
                return None
            entry.last_used = self._clock()
            return entry.arena

    def put(self, ref: ImageRef, manifest_digest: str, arena: Arena) -> None:
        if self.retention_s <= 0 or arena.nbytes > self.max_bytes:
            return
        with self._lock:
            self._entries[ref] = HostEntry(ref, manifest_digest, arena, self._clock())
            self._expire()

    def __len__(self) -> int:
        return len(self._entries)

    def _expire(self) -> None:
        drop = plan_expiry(
            list(self._entries.values()),
            now=self._clock(),
            retention_s=self.retention_s,
            max_bytes=self.max_bytes,
        )
        for entry in drop:
            del self._entries[entry.ref]
            logger.info("host tier dropped model=%s version=%s", entry.ref.model, entry.ref.version)
