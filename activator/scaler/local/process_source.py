"""Where the warm pool's `thaw serve` processes come from: forked by the fork server, or spawned.

    ForkSource   a zygote that imported the frameworks forks each one (milliseconds to ready)
    SpawnSource  a fresh interpreter each (seconds: interpreter start + framework imports)

The pool asks `ForkSource` first; once the fork server could not be started `max_failures`
times in a row (or is turned off: `thaw up --fork-server off`), it spawns instead. Both take
the `thaw serve` arguments after the command (`[REPO, "--port", "0", ...]`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Protocol

from activator.errors import ActivationFailed
from activator.scaler.local.fork_server import ForkServer
from activator.scaler.local.replica_process import ReplicaProcess

__all__ = ["ForkSource", "ProcessSource", "SpawnSource"]

logger = logging.getLogger(__name__)


class ProcessSource(Protocol):
    """Starts runtime processes (not yet ready: the caller waits for that)."""

    kind: str  # "fork-server" | "spawn": shown by `thaw status`

    def available(self) -> bool:
        """False once this source has given up (the pool then uses its fallback)."""
        ...

    async def start_process(self, args: Sequence[str], name: str) -> ReplicaProcess: ...

    def server_pid(self) -> int | None:
        """The process the source itself runs (the fork server), whose memory counts too."""
        ...

    async def close(self) -> None: ...


class SpawnSource:
    """Each process is a fresh `command ARGS` child."""

    kind = "spawn"

    def __init__(self, command: Sequence[str]) -> None:
        self._command = tuple(command)

    def available(self) -> bool:
        return True

    async def start_process(self, args: Sequence[str], name: str) -> ReplicaProcess:
        return await ReplicaProcess.spawn([*self._command, *args], name)

    def server_pid(self) -> int | None:
        return None

    async def close(self) -> None:
        return None


class ForkSource:
    """Each process is forked by one fork server, started on first use and after it died."""

    kind = "fork-server"

    def __init__(
        self, command: Sequence[str], *, start_timeout_s: float, max_failures: int = 2
    ) -> None:
        self._command = tuple(command)
        self._start_timeout_s = start_timeout_s
        self._max_failures = max_failures
        self._failures = 0
        self._server: ForkServer | None = None
        self._starting: asyncio.Task[ForkServer] | None = None
        self.gave_up: str | None = None  # why it stopped trying, for the log and status

    def available(self) -> bool:
        return self.gave_up is None

    async def server(self) -> ForkServer:
        """The running fork server: started once, shared by concurrent callers."""
        if self._server is not None and self._server.alive:
            return self._server
        if self.gave_up is not None:
            raise ActivationFailed(f"no fork server: {self.gave_up}")
        if self._starting is None:
            self._starting = asyncio.create_task(self._start())
        try:
            return await asyncio.shield(self._starting)
        finally:
            if self._starting is not None and self._starting.done():
                self._starting = None

    async def _start(self) -> ForkServer:
        if self._server is not None:
            await self._server.close()
            self._server = None
        started = time.monotonic()
        try:
            server = await ForkServer.start(self._command, timeout_s=self._start_timeout_s)
        except ActivationFailed as exc:
            self._failures += 1
            if self._failures >= self._max_failures:
                self.gave_up = f"{exc} ({self._failures} tries)"
                logger.warning("warm pool: fork server given up, spawning instead: %s", exc)
            raise
        self._failures = 0
        self._server = server
        logger.info("warm pool: fork server up in %.2f s", time.monotonic() - started)
        return server

    async def start_process(self, args: Sequence[str], name: str) -> ReplicaProcess:
        server = await self.server()
        child = await server.fork(list(args))
        return ReplicaProcess.adopt(child, name, list(args), child.stdout, child.stderr)

    def server_pid(self) -> int | None:
        server = self._server
        return server.proc.pid if server is not None and server.alive else None

    async def close(self) -> None:
        if self._starting is not None:
            self._starting.cancel()
            await asyncio.gather(self._starting, return_exceptions=True)
        if self._server is not None:
            await self._server.close()
            self._server = None
