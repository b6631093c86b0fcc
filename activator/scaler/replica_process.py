"""One `thaw serve` child process: spawn, read its address, wait ready, load, stop, reap."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections import deque
from pathlib import Path

import aiohttp

from activator.errors import ActivationFailed
from thawwire.handoff_protocol import listening_url

__all__ = ["ReplicaProcess"]

logger = logging.getLogger(__name__)

HANDOFF_FLAG = "--handoff-socket"
_STDERR_LINES = 40


class ReplicaProcess:
    """A runtime process started with `--port 0`; `url` is known once it printed its address."""

    def __init__(
        self, proc: asyncio.subprocess.Process, name: str, handoff_socket: Path | None = None
    ) -> None:
        self.proc = proc
        self.name = name
        self.url = ""
        self.handoff_socket = handoff_socket  # where it takes handed-off client connections
        self.model: str | None = None
        self._stderr: deque[str] = deque(maxlen=_STDERR_LINES)
        self._readers: list[asyncio.Task[None]] = []
        self._listening: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.stopping = False

    @classmethod
    async def spawn(cls, argv: list[str], name: str) -> ReplicaProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            # Own session (so own process group): a terminal's Ctrl-C reaches only `thaw up`,
            # which drains and stops its replicas in order instead of all dying at once.
            start_new_session=True,
        )
        flag = argv.index(HANDOFF_FLAG) if HANDOFF_FLAG in argv[:-1] else None
        self = cls(proc, name, None if flag is None else Path(argv[flag + 1]))
        assert proc.stdout is not None and proc.stderr is not None  # PIPE above
        self._readers = [
            asyncio.create_task(self._read_stdout(proc.stdout)),
            asyncio.create_task(self._read_stderr(proc.stderr)),
        ]
        logger.debug("spawned %s pid=%d", name, proc.pid)
        return self

    async def _read_stdout(self, stream: asyncio.StreamReader) -> None:
        # Keep reading for the process's life so a chatty child never blocks on a full pipe.
        while line := await stream.readline():
            url = listening_url(line.decode(errors="replace"))
            if url is not None and not self._listening.done():
                self._listening.set_result(url)
        if not self._listening.done():
            self._listening.set_exception(self._died("exited before listening"))

    async def _read_stderr(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self._stderr.append(line.decode(errors="replace").rstrip())

    def stderr_tail(self, lines: int = 8) -> str:
        return " | ".join(list(self._stderr)[-lines:])

    def _died(self, what: str) -> ActivationFailed:
        code = self.proc.returncode
        tail = self.stderr_tail()
        return ActivationFailed(
            f"replica {self.name} {what} (exit code {code})" + (f": {tail}" if tail else "")
        )

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    async def wait_ready(self, session: aiohttp.ClientSession, deadline: float) -> None:
        """Wait for THAW_LISTENING, then for /v2/health/ready == 200, before `deadline`."""
        try:
            remaining = max(0.01, deadline - time.monotonic())
            self.url = await asyncio.wait_for(asyncio.shield(self._listening), remaining)
        except TimeoutError:
            raise ActivationFailed(f"replica {self.name} did not start listening") from None
        while time.monotonic() < deadline:
            if not self.alive:
                raise self._died("exited while starting")
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                timeout = aiohttp.ClientTimeout(total=2)
                async with session.get(f"{self.url}/v2/health/ready", timeout=timeout) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.05)
        raise ActivationFailed(f"replica {self.name} was not ready in time")

    async def load(self, session: aiohttp.ClientSession, model: str, timeout_s: float) -> None:
        """POST the load call; returns when the runtime says the model is READY."""
        url = f"{self.url}/v2/repository/models/{model}/load"
        load = asyncio.ensure_future(self._post_load(session, url, model, timeout_s))
        exited = asyncio.ensure_future(self.proc.wait())
        try:
            done, _ = await asyncio.wait({load, exited}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
        if load not in done:
            load.cancel()
            raise self._died(f"died while loading model '{model}'")
        load.result()
        self.model = model

    @staticmethod
    async def _post_load(
        session: aiohttp.ClientSession, url: str, model: str, timeout_s: float
    ) -> None:
        try:
            timeout = aiohttp.ClientTimeout(total=timeout_s)
            async with session.post(url, json={}, timeout=timeout) as resp:
                if resp.status == 200:
                    return
                text = (await resp.text())[:2000]
        except TimeoutError:
            raise ActivationFailed(f"model '{model}' did not load within {timeout_s:g} s") from None
        except aiohttp.ClientError as exc:
            raise ActivationFailed(f"model '{model}' load call failed: {exc}") from exc
        raise ActivationFailed(f"model '{model}' failed to load: {_error_text(text)}")

    async def stop(self, timeout_s: float) -> int | None:
        """SIGTERM, wait up to `timeout_s`, SIGKILL; always reaps. Returns the exit code."""
        self.stopping = True
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout_s)
            except TimeoutError:
                logger.warning(
                    "replica %s ignored SIGTERM for %.1f s; killing", self.name, timeout_s
                )
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
        code = await self.proc.wait()
        for task in self._readers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(task, 2)
        return code


def _error_text(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip() or "(empty response)"
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return str(data["error"])
    return body.strip()
