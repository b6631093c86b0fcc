"""`thaw serve --front native`: the native HTTP front (native/front, decision 0032) on the HTTP
port, this server's application behind it on a private Unix socket.

    client ─▶ thaw-front (HOST:PORT) ─▶ <private dir>/serve.sock ─▶ the aiohttp application
                   └─ hot infers ─▶ relay of each hot instance's stub socket ─▶ its stub

The front answers the hot Python models' infers itself (phase 2 of decision 0032; which ones:
runtime.process.hot_models, over the control socket: runtime.process.front_control) and
forwards every other request, whole (phase 1), so everything else the application does
(routes, errors, limits, deadlines of bodies) is as without it. The front is a child process of
this server: it prints `THAW_FRONT_LISTENING http://HOST:PORT` once it accepts connections; on
`stop DEADLINE IDLE` on its standard input it drains as this server would
(thawserver.connection_drain: no more accepts, `Connection: close` on each answer, a connection
idle for IDLE closed), printing `THAW_FRONT_OPEN N` as its open connections go, from which this
server logs Triton's countdown; then it goes on relaying the stubs until that input ends (the
models unloaded, each `finalize()` run), and it exits at once when that input ends (this server
gone, however it went).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

from runtime.config import ServeConfig
from runtime.errors import ServingError
from runtime.http.front_outcome import FrontLink
from runtime.http.handlers import V2Handlers
from runtime.models.lifecycle import ServerState
from runtime.models.manager import ModelManager
from runtime.process.front_control import FrontCollector, FrontControl
from runtime.process.hot_models import HotModels
from thawserver.connection_drain import count_down_connections
from thawserver.connection_limits import ConnectionLimits
from thawserver.grpc_keepalive import GrpcKeepalive

__all__ = [
    "FRONT_BINARY_ENV",
    "GRPC_SOCKET",
    "NativeFront",
    "front_binary",
    "grpc_refusal",
    "private_socket_dir",
]

logger = logging.getLogger(__name__)

FRONT_BINARY_ENV = "THAW_FRONT_BINARY"
"""Names the front's binary (else the checkout's `make native` build, else `thaw-front` on PATH)."""

_BUILT = Path(__file__).resolve().parents[2] / "native" / "front" / "target" / "release"
_LISTENING = "THAW_FRONT_LISTENING "
_GRPC_LISTENING = "THAW_FRONT_GRPC "
GRPC_SOCKET = "grpc.sock"
"""The Python gRPC server's socket in the private directory, when the front takes the port."""
_MIN_GRPC_MESSAGE = 1 << 20  # the front reads ModelInfer messages up to 1 MiB itself
_OPEN = "THAW_FRONT_OPEN"
_START_TIMEOUT_S = 15.0
_STOP_GRACE_S = 2.0  # past the stop's deadline before the front is killed


def front_binary() -> Path:
    """The front's executable; ServingError says how to get one."""
    named = os.environ.get(FRONT_BINARY_ENV)
    if named:
        path = Path(named)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ServingError(f"{FRONT_BINARY_ENV}={named}: not an executable file")
        return path
    built = _BUILT / "thaw-front"
    if built.is_file() and os.access(built, os.X_OK):
        return built
    found = shutil.which("thaw-front")
    if found is not None:
        return Path(found)
    raise ServingError(
        "`--front native` needs the thaw-front binary: build it with `make native` (cargo and "
        "Debian's librust-* crates, README 'The native front'), or name it in "
        f"{FRONT_BINARY_ENV}"
    )


def private_socket_dir() -> Path:
    """A new directory only this user can enter (0700), for the application's Unix socket."""
    return Path(tempfile.mkdtemp(prefix="thaw-front-"))


def grpc_refusal(config: ServeConfig) -> str | None:
    """Why the native front cannot take the gRPC port for `config` (None: it can): a setting
    grpcio honours that the front does not (decision 0032 phase 3); the port then stays the
    Python gRPC server's, as before."""
    if config.grpc_tls is not None:
        return "gRPC over TLS (--grpc-use-ssl)"
    if config.grpc_response_compression_level != "none":
        return "compressed gRPC responses (--grpc-infer-response-compression-level)"
    if config.grpc_keepalive != GrpcKeepalive():
        return "gRPC keepalive settings other than the defaults"
    if config.grpc_restricted_protocols:
        return "restricted gRPC protocols (--grpc-restricted-protocol)"
    if config.grpc_header_forward_pattern:
        return "gRPC headers forwarded to models (--grpc-header-forward-pattern)"
    if config.grpc_max_message < _MIN_GRPC_MESSAGE:
        return f"a gRPC message cap under {_MIN_GRPC_MESSAGE} bytes"
    return None


def _listen_address(host: str, port: int) -> str:
    """`host:port` as the front's `--listen` takes it: a name resolved to its first address
    (as a socket bound to it would take), IPv6 in brackets; "" is every IPv4 address."""
    try:
        infos = socket.getaddrinfo(
            host or "0.0.0.0", port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise ServingError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    family, address = infos[0][0], infos[0][4]
    return f"[{address[0]}]:{port}" if family == socket.AF_INET6 else f"{address[0]}:{port}"


@dataclass
class NativeFront:
    """The running front: its URL, its process; its control socket and the task keeping its
    hot models in step (runtime.process.hot_models), once `answer_hot_models` ran."""

    url: str
    process: asyncio.subprocess.Process
    socket_dir: Path
    control: FrontControl | None = None
    grpc_address: str | None = None  # HOST:PORT, where the front took the gRPC port
    hot: asyncio.Task[None] | None = None

    def answer_hot_models(
        self, manager: ModelManager, handlers: V2Handlers, config: ServeConfig
    ) -> None:
        """Let the front answer the hot Python models' infers (phase 2 of decision 0032):
        their stubs relayed through it, their versions served, its statistics added to this
        server's, its failures answered by this server, every infer forwarded while tracing."""
        control = self.control
        if control is None:
            return
        sync_stats = functools.partial(control.sync_stats, manager.stats_book)

        def record_outcome(
            model: str, version: str, batch: int, request_ns: int, answered: bool
        ) -> None:
            control.count_answered(model, version)
            manager.record_front_outcome(model, version, batch, request_ns, answered)

        handlers.front = FrontLink(
            token=control.token, sync_stats=sync_stats, record_outcome=record_outcome
        )
        manager.register_collector(FrontCollector(control))

        manager.count_pending_of(lambda: control.pending)
        if handlers.tracer is not None:
            settings = handlers.tracer.settings
            settings.watchers.append(functools.partial(control.pause, "tracing"))
            control.pause("tracing", settings.maybe_tracing)
        hot = HotModels(control, manager, config)
        self.hot = asyncio.create_task(hot.run(), name="native-front-hot-models")

    @classmethod
    async def start(
        cls,
        *,
        host: str,
        port: int,
        reuse_port: bool,
        socket_dir: Path,
        limits: ConnectionLimits,
        control: FrontControl | None = None,
        grpc: tuple[str, int, bool] | None = None,
    ) -> NativeFront:
        """Start the front on host:port before the application on `socket_dir`/serve.sock;
        ServingError says why it did not start (its own error is on stderr before it).
        `control`: the control socket whose other end the front inherits (hot models).
        `grpc`: (host, port, reuse_port) of the gRPC port the front takes, before the Python
        gRPC server on `socket_dir`/grpc.sock."""
        try:
            binary, listen = front_binary(), _listen_address(host, port)
            grpc_listen = _listen_address(grpc[0], grpc[1]) if grpc is not None else None
        except ServingError:
            shutil.rmtree(socket_dir, ignore_errors=True)  # nothing will listen behind it
            raise
        argv = [
            str(binary),
            "--listen", listen,
            "--upstream", str(socket_dir / "serve.sock"),
            "--head-timeout-s", f"{limits.head_timeout_s:g}",
            "--idle-timeout-s", f"{limits.idle_timeout_s:g}",
            "--max-connections", str(limits.max_connections),
        ]  # fmt: skip
        if reuse_port:
            argv.append("--reuse-port")
        if grpc is not None and grpc_listen is not None:
            argv += ["--grpc-listen", grpc_listen, "--grpc-upstream", str(socket_dir / GRPC_SOCKET)]
            if grpc[2]:
                argv.append("--grpc-reuse-port")
        pass_fds: tuple[int, ...] = ()
        if control is not None:
            argv += ["--control-fd", str(control.front_end.fileno())]
            pass_fds = (control.front_end.fileno(),)
        # A session (process group) of its own: a terminal's Ctrl-C, or a stop signalled to the
        # server's whole group, is the server's to act on; it then stops the front in order.
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
            pass_fds=pass_fds,
        )
        if control is not None:
            control.attach(asyncio.get_running_loop())  # the front holds its end now
        assert process.stdout is not None  # piped
        grpc_address = None
        while True:
            try:
                line = await asyncio.wait_for(process.stdout.readline(), _START_TIMEOUT_S)
            except TimeoutError:
                line = b""
            text = line.decode(errors="replace").strip()
            if not text.startswith(_GRPC_LISTENING):
                break
            grpc_address = text.split(None, 1)[1]
        if not text.startswith(_LISTENING.strip()):
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            code = await process.wait()
            shutil.rmtree(socket_dir, ignore_errors=True)
            why = text or "its error is above"
            raise ServingError(f"the native front did not start (exit {code}): {why}")
        url = text.split(None, 1)[1]
        logger.info("native front on %s, forwarding to %s", url, socket_dir / "serve.sock")
        if grpc_address is not None:
            logger.info("native front on %s (gRPC), forwarding to %s", grpc_address,
                        socket_dir / GRPC_SOCKET)  # fmt: skip
        return cls(
            url=url,
            process=process,
            socket_dir=socket_dir,
            control=control,
            grpc_address=grpc_address,
        )

    async def exited(self, state: ServerState) -> None:
        """Return when the front exits on its own (it never should): the server then stops
        with exit 1, as a server whose listener is gone, saying why."""
        code = await self.process.wait()
        error = ServingError(f"the native front exited (code {code}): the HTTP port is gone")
        logger.error("%s", error.message)
        state.start_error = error

    async def stop(self, deadline_s: float, idle_s: float) -> float:
        """Stop accepting; serve the open connections until each is idle `idle_s` or
        `deadline_s` passed, logging Triton's countdown of them; the seconds left."""
        if self.hot is not None:
            self.hot.cancel()
        stdin, stdout = self.process.stdin, self.process.stdout
        open_now = [0]
        if stdin is not None and stdout is not None and self.process.returncode is None:
            with contextlib.suppress(ConnectionError):
                stdin.write(f"stop {deadline_s:g} {idle_s:g}\n".encode())
                await stdin.drain()
            first = await _open_count(stdout)
            open_now[0] = first if first is not None else 0
            reader = asyncio.create_task(_follow_open_count(stdout, open_now))
            remaining_s = await count_down_connections(lambda: open_now[0], deadline_s)
            reader.cancel()
        else:
            remaining_s = deadline_s
        if self.control is None:  # it exits once drained
            await self.close(remaining_s + _STOP_GRACE_S)
        return remaining_s

    async def close(self, wait_s: float = _STOP_GRACE_S) -> None:
        """End the front (after `stop`, once the models are unloaded: with a control socket
        it relays their stubs until then, so each model's finalize() runs) and remove the
        private socket's directory."""
        stdin = self.process.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()  # its end of input: it exits
        try:
            await asyncio.wait_for(self.process.wait(), wait_s)
        except TimeoutError:
            logger.warning("the native front did not exit in %.1fs: killed", wait_s)
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        if self.control is not None:
            self.control.close()
        shutil.rmtree(self.socket_dir, ignore_errors=True)


async def _open_count(stdout: asyncio.StreamReader) -> int | None:
    """The next `THAW_FRONT_OPEN N` the stopping front prints; None at the end of its output."""
    while line := await stdout.readline():
        word, _, count = line.decode(errors="replace").partition(" ")
        if word == _OPEN and count.strip().isdigit():
            return int(count)
    return None


async def _follow_open_count(stdout: asyncio.StreamReader, open_now: list[int]) -> None:
    """Keep `open_now[0]` the front's open connections until its output ends (then 0)."""
    while (count := await _open_count(stdout)) is not None:
        open_now[0] = count
    open_now[0] = 0
