"""Settings posted to replicas in the background: one small JSON POST per replica, a deadline,
a failure logged (the replica keeps its settings until the next change), never awaited by the
request or the wake that caused it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiohttp

__all__ = ["ReplicaPoster"]

logger = logging.getLogger(__name__)

_PUSH_TIMEOUT_S = 10.0


class ReplicaPoster:
    """Posts JSON bodies to replicas from tasks it keeps until they end."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session
        self._tasks: set[asyncio.Task[None]] = set()

    def post(self, url: str, path: str, body: Callable[[], dict[str, Any]]) -> None:
        """Send `body()` to `url + path` in the background; the body is made when it is sent,
        so that of two posts in flight neither sends settings older than the other's."""
        task = asyncio.get_running_loop().create_task(self._post(url + path, body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Wait for the posts under way (each has its own deadline)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _post(self, url: str, body: Callable[[], dict[str, Any]]) -> None:
        try:
            async with self._session.post(
                url, json=body(), timeout=aiohttp.ClientTimeout(_PUSH_TIMEOUT_S)
            ) as response:
                if response.status != 200:
                    logger.warning(
                        "replica refused %s (%d): %s",
                        url, response.status, (await response.text())[:200],
                    )  # fmt: skip
        except (aiohttp.ClientError, TimeoutError) as exc:
            # A replica that went away meanwhile: the next one to start is told.
            logger.warning("could not send settings to %s: %s", url, exc)
