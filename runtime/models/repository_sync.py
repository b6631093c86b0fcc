"""The seam to a repository that lives elsewhere (S3): brought in line before each re-read of
the repositories, as tritonserver reads its cloud repository again on index, load and poll.

    index   synced first; a source that cannot be read answers from the last copy (logged)
    load    synced first; one that cannot be read fails the load in Triton's words:
            "failed to load '<name>', failed to poll from model repository: <why>"
    poll    synced first; one that cannot be read skips this poll (no model is unloaded)

`thaw serve` passes thawserver.s3_repository.localize's repositories; None: local only.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

__all__ = ["RepositorySync", "sync_repositories"]


class RepositorySync(Protocol):
    """Local copies of remote repositories."""

    def sync(self) -> None:
        """Bring the copies in line with their sources (blocking: run in a thread). OSError
        when a source cannot be read; the message names the repository, never a secret."""


async def sync_repositories(source: RepositorySync | None) -> None:
    """`source.sync()` off the event loop (nothing for local repositories); OSError."""
    if source is not None:
        await asyncio.to_thread(source.sync)
