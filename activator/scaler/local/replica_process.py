"""One local `thaw serve` process: spawn (or adopt a forked one), read its address, wait ready,
load, stop, reap.

Readiness and the load go through `runtime_control.RuntimeControl`, raced against the
process's exit; this module adds only what is particular to a local process. The process is
either our own child (`spawn`: an asyncio subprocess) or a child of the warm pool's fork
server (`forked`: activator.scaler.local.fork_server.ForkedChild); both are a `LocalProcess`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import aiohttp

from activator.errors import ActivationFailed
from activator.scaler.local import pipe_lines, replica_log
from activator.scaler.runtime_control import RuntimeControl
from thawserver.log_control import RELAYED
from thawserver.log_records import escapes_messages
from thawwire.handoff_protocol import Surface, listening_url, surface_address

__all__ = ["LocalProcess", "ReplicaProcess", "SpawnedChild"]

logger = logging.getLogger(__name__)
# A replica's log lines, logged again in `thaw up`'s log (replica_log).
_replica_logger = logging.getLogger("thaw.replica")

HANDOFF_FLAG = "--handoff-socket"
_STDERR_LINES = 40


def _relay(name: str, line: replica_log.ReplicaLine) -> None:
    """A replica's line in `thaw up`'s log: a record keeps the replica's process id, file and
    line, and passes as the replica's settings passed it (RELAYED); other text is a warning."""
    if line.pid is None:
        _replica_logger.log(line.level, "%s %s", name, line.message)
        return
    record = _replica_logger.makeRecord(
        _replica_logger.name, line.level, line.file, line.line, "%s %s", (name, line.message), None
    )
    record.process = line.pid
    record.__dict__[RELAYED] = True
    _replica_logger.handle(record)


def _echo(line: bytes) -> None:
    """What a replica printed that is not one of its addresses (a Python model's `print`) on
    `thaw up`'s stdout, as `thaw serve` (and tritonserver) print their stubs' output."""
    out = getattr(sys.stdout, "buffer", None)
    with contextlib.suppress(OSError, ValueError):  # stdout closed: the line is dropped
        if out is None:
            sys.stdout.write(line.decode(errors="replace"))
        else:
            out.write(line if line.endswith(b"\n") else line + b"\n")
        sys.stdout.flush()


class LocalProcess(Protocol):
    """The part of asyncio's `Process` a replica uses; a forked child offers the same."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...

    def has_exited(self) -> bool:
        """Whether it has ended, even before its exit status was collected."""
        ...


class SpawnedChild:
    """An asyncio subprocess of ours as a `LocalProcess`."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self.pid = proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    async def wait(self) -> int:
        return await self._proc.wait()

    def send_signal(self, sig: int) -> None:
        self._proc.send_signal(sig)

    def kill(self) -> None:
        self._proc.kill()

    def has_exited(self) -> bool:
        if self._proc.returncode is not None:
            return True
        try:  # look without reaping it: asyncio's child watcher does that
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True  # already reaped


class ReplicaProcess:
    """A runtime process started with `--port 0`; `url` is known once it printed its address."""

    def __init__(self, proc: LocalProcess, name: str, handoff_socket: Path | None = None) -> None:
        self.proc = proc
        self.name = name
        self.url = ""
        self.grpc_address: str | None = None  # announced before `url` (handoff_protocol)
        self.handoff_socket = handoff_socket  # where it takes handed-off client connections
        self.model: str | None = None
        self.warmup_s = 0.0  # the model's warm-up samples, inside its load call
        self.control: RuntimeControl | None = None  # once it listens
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
        assert proc.stdout is not None and proc.stderr is not None  # PIPE above
        logger.debug("spawned %s pid=%d", name, proc.pid)
        return cls.adopt(SpawnedChild(proc), name, argv, proc.stdout, proc.stderr)

    @classmethod
    def adopt(
        cls,
        proc: LocalProcess,
        name: str,
        argv: Sequence[str],
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
    ) -> ReplicaProcess:
        """A process already started with `argv` (spawned here or forked by the fork server)
        whose output arrives on `stdout` and `stderr`."""
        flag = argv.index(HANDOFF_FLAG) if HANDOFF_FLAG in argv[:-1] else None
        self = cls(proc, name, None if flag is None else Path(argv[flag + 1]))
        self._readers = [
            asyncio.create_task(self._read_stdout(stdout)),
            asyncio.create_task(self._read_stderr(stderr)),
        ]
        return self

    async def _read_stdout(self, stream: asyncio.StreamReader) -> None:
        # Keep reading for the process's life so a chatty child never blocks on a full pipe.
        async for line in pipe_lines.lines(stream):
            text = line.decode(errors="replace")
            surface = surface_address(text)
            url = listening_url(text)
            if surface is None and url is None:
                _echo(line)
                continue
            if surface is not None and surface[0] is Surface.GRPC and not self._listening.done():
                self.grpc_address = surface[1]
            if url is not None and not self._listening.done():
                self._listening.set_result(url)
        if not self._listening.done():
            self._listening.set_exception(self._died("exited before listening"))

    async def _read_stderr(self, stream: asyncio.StreamReader) -> None:
        escaped = escapes_messages()  # the replica's environment is this process's
        async for line in pipe_lines.lines(stream):
            text = line.decode(errors="replace").rstrip()
            self._stderr.append(text)
            if text:
                _relay(self.name, replica_log.parse(text, escaped=escaped))

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
        return not self.proc.has_exited()

    async def wait_ready(self, session: aiohttp.ClientSession, deadline: float) -> None:
        """Wait for THAW_LISTENING, then for the runtime to be ready, before `deadline`."""
        try:
            remaining = max(0.01, deadline - time.monotonic())
            self.url = await asyncio.wait_for(asyncio.shield(self._listening), remaining)
        except TimeoutError:
            raise ActivationFailed(f"replica {self.name} did not start listening") from None
        self.control = RuntimeControl(session, self.url, name=self.name)
        await self._unless_exited(self.control.wait_ready(deadline), "exited while starting")

    async def load(
        self, model: str, timeout_s: float, parameters: Mapping[str, str] | None = None
    ) -> None:
        """The load call (with a repository load's override as `parameters`); returns when
        the runtime says the model is READY."""
        if self.control is None:
            raise ActivationFailed(f"replica {self.name} was never ready")
        loading = asyncio.ensure_future(
            self.control.load(model, timeout_s=timeout_s, parameters=parameters)
        )
        await self._unless_exited(loading, f"died while loading model '{model}'")
        self.warmup_s = loading.result()
        self.model = model

    async def _unless_exited(self, call: Awaitable[object], what: str) -> None:
        """Run a control call; if the process exits first, cancel it and fail with `what`."""
        running = asyncio.ensure_future(call)
        exited = asyncio.ensure_future(self.proc.wait())
        try:
            done, _ = await asyncio.wait({running, exited}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
            if not running.done():
                running.cancel()
        if running not in done:
            raise self._died(what)
        running.result()

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
        if self._listening.done() and not self._listening.cancelled():
            # A start cut short by this stop (`thaw up` stopping while its pool refills): the
            # wait for it was cancelled, so nobody reads its "exited before listening" now;
            # read here, else asyncio logs it at shutdown as an error never retrieved.
            self._listening.exception()
        return code
