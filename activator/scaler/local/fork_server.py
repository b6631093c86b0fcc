"""The activator's end of the warm pool's fork server: start it, fork children, see them end.

The zygote is `thaw serve REPO --fork-server-fd FD` (runtime/process/zygote.py, which states the
fork-safety rules), started as a child of `thaw up` with one end of a socketpair; the
protocol is thawwire.pool_protocol. A child it forks is a `thaw serve` process like a spawned
one, except that it is the zygote's child, not ours: its stdout and stderr are pipes created
here and handed over with the fork request, its end is seen through a pidfd (and its exit
status reported by the zygote, which reaps it), and signals go through that pidfd, so a
recycled pid can never be signalled by mistake.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import socket
from collections.abc import Sequence
from typing import Any

from activator.errors import ActivationFailed
from activator.scaler.local import pipe_lines
from thawwire.pool_protocol import FrameDecoder, Op, PoolProtocolError, encode_frame

__all__ = ["ForkServer", "ForkedChild"]

logger = logging.getLogger(__name__)

_EXIT_REPORT_GRACE_S = 2.0  # a child seen gone waits this long for the zygote's exit status
UNKNOWN_EXIT = -255  # the zygote never reported how a child ended (it was gone too)
_STDERR_LINES = 40


class ForkedChild:
    """A process the zygote forked: `pid`, `returncode` once it ended (None while it runs),
    `wait()`, `send_signal()`, `kill()`, like asyncio's Process; `stdout`/`stderr` readers."""

    def __init__(self, pid: int, stdout: asyncio.StreamReader, stderr: asyncio.StreamReader):
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._gone = asyncio.Event()  # the process no longer runs (status may still come)
        self._done = asyncio.Event()  # returncode is final
        self._loop = asyncio.get_running_loop()
        self._pidfd: int | None = None
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:  # ended (and reaped) before we looked: the report follows
            self._mark_gone()
            return
        self._loop.add_reader(self._pidfd, self._on_pidfd)

    def has_exited(self) -> bool:
        """Whether the process has ended (its status may not be known yet)."""
        return self._gone.is_set()

    async def wait(self) -> int:
        await self._done.wait()
        assert self.returncode is not None  # set with _done
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self._pidfd is None or self._gone.is_set():
            raise ProcessLookupError(self.pid)
        signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def reported(self, status: int) -> None:
        """The zygote reaped this child: `status` is final."""
        self._mark_gone()
        self._finish(status)

    def server_lost(self) -> None:
        """The zygote is gone: no status will come for this child once it ends."""
        if self._gone.is_set():
            self._finish(UNKNOWN_EXIT)

    def _on_pidfd(self) -> None:
        self._mark_gone()
        self._loop.call_later(_EXIT_REPORT_GRACE_S, self._finish, UNKNOWN_EXIT)

    def _mark_gone(self) -> None:
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        self._gone.set()

    def _finish(self, status: int) -> None:
        if self.returncode is None:
            self.returncode = status
        self._done.set()


class ForkServer:
    """One zygote process and its control socket; `fork` makes a child, `close` stops it."""

    def __init__(self, proc: asyncio.subprocess.Process, sock: socket.socket) -> None:
        self.proc = proc
        self._sock = sock
        self._decoder = FrameDecoder()
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._abandoned: set[int] = set()  # requests whose caller left before the answer
        self._children: dict[int, ForkedChild] = {}
        self._ready: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._stderr: list[str] = []
        self.info: dict[str, Any] = {}  # the zygote's `ready` frame
        self.lost = asyncio.Event()

    @classmethod
    async def start(cls, command: Sequence[str], *, timeout_s: float) -> ForkServer:
        """Start `command` + `--fork-server-fd FD`; return once it reported ready."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            proc = await asyncio.create_subprocess_exec(
                *command,
                "--fork-server-fd",
                str(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                start_new_session=True,
            )
        except OSError as exc:
            ours.close()
            raise ActivationFailed(f"could not start the fork server: {exc}") from exc
        finally:
            theirs.close()
        ours.setblocking(False)
        server = cls(proc, ours)
        server._listen()
        try:
            server.info = await asyncio.wait_for(asyncio.shield(server._ready), timeout_s)
        except (TimeoutError, ActivationFailed) as exc:
            await server.close()
            if isinstance(exc, ActivationFailed):
                raise
            raise ActivationFailed(f"fork server not ready within {timeout_s:g} s") from None
        except BaseException:
            await server.close()
            raise
        logger.info(
            "fork server pid=%d ready in %.2f s (imported %s; children import %s)",
            proc.pid, server.info["import_s"], server.info["preloaded"], server.info["deferred"],
        )  # fmt: skip
        return server

    def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(self._sock.fileno(), self._on_readable)
        assert self.proc.stderr is not None  # PIPE above
        self._stderr_task = loop.create_task(self._read_stderr(self.proc.stderr))

    async def _read_stderr(self, stream: asyncio.StreamReader) -> None:
        async for line in pipe_lines.lines(stream):
            self._stderr = [*self._stderr[-_STDERR_LINES:], line.decode(errors="replace").rstrip()]

    @property
    def alive(self) -> bool:
        return not self.lost.is_set()

    async def fork(self, argv: Sequence[str], *, timeout_s: float = 10.0) -> ForkedChild:
        """A new child running `thaw serve ARGV`; ActivationFailed if the zygote refuses."""
        if not self.alive:
            raise ActivationFailed("the fork server is gone")
        loop = asyncio.get_running_loop()
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        request = next(self._ids)
        answer: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._pending[request] = answer
        try:
            frame = encode_frame(Op.FORK, id=request, argv=list(argv))
            try:
                # One small frame: the socket buffer takes it whole or the zygote is stuck.
                socket.send_fds(self._sock, [frame], [out_w, err_w])
            except OSError as exc:
                raise ActivationFailed(f"fork request failed: {exc}") from exc
        finally:
            os.close(out_w)
            os.close(err_w)
        try:
            try:
                reply = await asyncio.wait_for(answer, timeout_s)
            except BaseException:
                self._abandoned.add(request)  # a child forked for it after all is stopped
                raise
            stdout = await _reader(out_r)
            out_r = -1
            stderr = await _reader(err_r)
            err_r = -1
        except TimeoutError:
            raise ActivationFailed(f"fork server did not fork within {timeout_s:g} s") from None
        finally:
            self._pending.pop(request, None)
            for fd in (out_r, err_r):
                if fd >= 0:
                    os.close(fd)
        if reply["op"] == Op.ERROR:
            raise ActivationFailed(f"fork server refused: {reply['error']}")
        child = ForkedChild(int(reply["pid"]), stdout, stderr)
        self._children[child.pid] = child
        return child

    def _on_readable(self) -> None:
        try:
            data = self._sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError as exc:
            logger.warning("fork server control socket failed: %s", exc)
            data = b""
        if not data:
            self._lose("its control socket closed")
            return
        try:
            messages = self._decoder.feed(data)
        except PoolProtocolError as exc:
            self._lose(f"it broke the protocol: {exc}")
            return
        for message in messages:
            self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        op = Op(message["op"])
        if op is Op.READY:
            if not self._ready.done():
                self._ready.set_result(message)
        elif op is Op.EXITED:
            child = self._children.pop(int(message["pid"]), None)
            if child is not None:
                child.reported(int(message["status"]))
        elif message["id"] in self._abandoned:
            self._abandoned.discard(message["id"])
            if op is Op.FORKED:  # nobody will adopt it: stop it, the zygote reaps it
                logger.info(
                    "fork server: stopping pid=%d, forked for a cancelled start", message["pid"]
                )
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(message["pid"]), signal.SIGTERM)
        else:
            future = self._pending.get(int(message["id"]))
            if future is not None and not future.done():
                future.set_result(message)

    def _lose(self, why: str, *, closing: bool = False) -> None:
        """The zygote can serve no more: every waiter fails; a warning with the last lines it
        wrote, unless `closing` (a stop asked for: one info line)."""
        if self.lost.is_set():
            return
        self.lost.set()
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
        if closing:
            error = ActivationFailed(f"fork server pid={self.proc.pid} closed")
        else:
            tail = " | ".join(self._stderr[-4:])
            error = ActivationFailed(f"fork server pid={self.proc.pid} gone: {why}: {tail}")
        if not self._ready.done():
            self._ready.set_exception(error)
            self._ready.exception()  # retrieved: nobody else may await it
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        for child in self._children.values():
            child.server_lost()
        logger.log(logging.INFO if closing else logging.WARNING, "%s", error)

    async def close(self, timeout_s: float = 5.0) -> None:
        """Stop the zygote (its serving children keep running)."""
        if not self.lost.is_set():
            self._lose("closed", closing=True)
        with contextlib.suppress(OSError):
            self._sock.close()
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), timeout_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        self._stderr_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._stderr_task


class _PipeProtocol(asyncio.StreamReaderProtocol):
    """A StreamReaderProtocol for a pipe: at EOF the transport closes, and the fd with it.

    StreamReaderProtocol.eof_received() asks to keep the transport open (a socket's other half
    may still write); uvloop honours that for pipes too, so without this every forked child
    left its two pipe fds open in the activator until the garbage collector found them."""

    def eof_received(self) -> bool:
        super().eof_received()
        return False


async def _reader(fd: int) -> asyncio.StreamReader:
    """An asyncio reader over the read end `fd` of a pipe (owned by it from now on; closed
    at EOF)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    pipe = os.fdopen(fd, "rb", buffering=0)
    await loop.connect_read_pipe(lambda: _PipeProtocol(reader), pipe)
    return reader
