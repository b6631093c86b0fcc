"""The Protocol every scaler backend implements, and the value it returns for a new replica."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["ScalerBackend", "StartedReplica"]


@dataclass(frozen=True)
class StartedReplica:
    """A replica serving `model` at `url`, ready (its load call returned 200).

    `claim_s`: getting a running, ready runtime process (warm pool claim or fresh start);
    `restore_s`: the load call (restore from an image, or the model's normal load).
    `pid`: the local process id, when the backend runs processes.
    """

    id: str
    model: str
    url: str
    claim_s: float
    restore_s: float
    pid: int | None = None


class ScalerBackend(Protocol):
    """Runs replicas. The model endpoint decides how many; the backend makes them exist.

    Errors: `start_replica` raises `ActivationFailed` with a message a user can act on.
    """

    async def start_replica(self, model: str, *, timeout_s: float) -> StartedReplica:
        """Bring up one replica serving `model`; returns once it is routable."""
        ...

    async def wait_lost(self, replica_id: str) -> str:
        """Return (with a reason) when the replica dies without being asked to stop."""
        ...

    async def stop_replica(self, replica_id: str, *, timeout_s: float) -> None:
        """Stop a drained replica: SIGTERM, wait `timeout_s`, then kill; always reaps."""
        ...

    async def close(self) -> None:
        """Stop every replica and pooled process this backend started."""
        ...
