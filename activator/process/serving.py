"""`thaw up`'s serving: bind the listen address and the Triton ports (gRPC, metrics), start
the app, the front door and the scaler, print the listening lines, and serve until SIGTERM or
SIGINT, then drain. activator.process.cli turns flags into the config this runs with."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from activator.config import ActivatorConfig, BoundAddresses
from activator.errors import ActivatorError, ScalerUnavailable
from activator.process.repository_cli import models_loaded_at_start, models_to_wake
from thawserver.log_control import LogControl

if TYPE_CHECKING:
    from activator.fleet.reload import RepositorySync

__all__ = ["ListenError", "LoadAtStartError", "loop_factory", "serve"]

logger = logging.getLogger(__name__)


class ListenError(Exception):
    """The activator could not bind its listen address."""


class LoadAtStartError(Exception):
    """A model `--load-model` names could not be woken at start (tritonserver, whose
    `--exit-on-error` defaults to true, does not start either)."""


async def _load_at_start(fleet: Any, names: tuple[str, ...]) -> None:
    """Wake each `--load-model` model now, as the repository `load` call does; the first that
    fails refuses the start, its error named."""
    fleet.loading_at_start = True  # not ready meanwhile (`--strict-readiness`)
    for name in names:
        try:
            await fleet.endpoint(name).warm()
        except Exception as exc:
            reason = getattr(exc, "message", None) or str(exc) or repr(exc)
            raise LoadAtStartError(f"failed to load '{name}': {reason}") from None
    fleet.loading_at_start = False


async def _complete_at_start(fleet: Any, repository: Any, names: Sequence[str]) -> None:
    """`--exit-on-error=true`: each of `names` whose config only a replica completes (a
    python model's own `auto_complete_config`, which tritonserver runs at its start) is woken
    and its config asked now, as its first config request would; the first refused one
    refuses the start, in `thaw serve --exit-on-error=true`'s words. The model then goes back
    to zero as any woken one does; its completed config is kept (activator.fleet.replica_config)."""
    hooked = [n for n in names if repository.get(n).replica_completes]
    if not hooked:
        return
    fleet.loading_at_start = True  # not ready meanwhile (`--strict-readiness`)
    for name in hooked:
        try:
            await fleet.replica_configs.completed(repository.get(name), fleet.endpoint(name), None)
        except ActivatorError as exc:
            raise LoadAtStartError(f"failed to load all models: {name}: {exc.message}") from None
    fleet.loading_at_start = False


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when installed (the proxy's per-request cost roughly halves), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def serve(
    config: ActivatorConfig,
    repository: Any = None,
    log: LogControl | None = None,
    repository_sync: RepositorySync | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT, then stop accepting, drain and stop every replica.
    `repository_sync`: the local copies of S3 repositories (activator.fleet.reload)."""
    from activator.direct.front_door import FrontDoor
    from activator.surfaces.app import CONNECTIONS, FLEET, MOVES, build_app
    from thawserver.aiohttp_compat import JsonErrorRunner
    from thawserver.connection_drain import DRAIN_IDLE_TIMEOUT_S, count_down_connections
    from thawwire.handoff_protocol import listening_line

    # Before anything starts: a SIGTERM/SIGINT during the start stops `thaw up` once it has
    # started. Installed after the listening line instead, a signal in between was lost (asyncio's
    # own SIGINT handler was replaced before it ran) and `thaw up` never stopped.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    listener, grpc_bound, bound = _bind(config)
    port = bound.http_port
    app = build_app(
        config, repository=repository, bound=bound, log=log, repository_sync=repository_sync
    )
    # auto_decompress off: compressed bodies pass through to the replica untouched. Requests
    # aiohttp cannot parse are answered in JSON, as every other error.
    runner = JsonErrorRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=30,
        auto_decompress=False,
    )
    try:
        await runner.setup()
    except ScalerUnavailable:
        listener.close()
        if grpc_bound is not None:
            await grpc_bound[0].stop(0)
        with contextlib.suppress(Exception):
            await runner.cleanup()
        raise
    assert runner.server is not None  # set by setup()
    try:
        extra = await _start_triton_ports(config, app, grpc_bound)
    except OSError as exc:
        await runner.cleanup()
        raise ListenError(str(exc)) from None
    door = FrontDoor(
        listener, runner.server, app[FLEET].endpoints, app[FLEET].metrics,
        guard=app[CONNECTIONS], handoff=not config.http_restrictions, moves=app[MOVES],
    )  # fmt: skip
    door.start()
    try:
        # A name several namespaces hold has no endpoint to wake (activator.fleet.repository).
        wake = [n for n in config.load_models if n not in repository.ambiguous]
        await _load_at_start(app[FLEET], models_to_wake(wake, repository.names()))
        if config.exit_on_error:
            loaded = models_loaded_at_start(
                config.load_models, explicit=config.model_control, servable=repository.names()
            )
            await _complete_at_start(app[FLEET], repository, loaded)
        for line in extra.lines:
            print(line, flush=True)
        print(listening_line(f"http://{config.host}:{port}"), flush=True)
        logger.info("thaw up: %d models", len(repository.names()))
        logger.info("Started HTTPService at %s:%d", config.host, port)  # tritonserver's words
        await stop.wait()
    finally:
        logger.info("thaw up: stopping (draining requests and replicas)")
        if extra.surface is not None:
            extra.surface.forwarder.stopping = True  # open gRPC streams begin nothing new
        await door.close()
        await app[FLEET].step_down()  # the Lease goes to another activator now, not after
        # As tritonserver: the clients' open connections are served until they close or the
        # exit timeout runs out (thawserver.connection_drain); in-flight requests get the rest.
        guard = app[CONNECTIONS]
        guard.start_draining(idle_timeout_s=DRAIN_IDLE_TIMEOUT_S)
        left_s = await count_down_connections(lambda: guard.open, config.drain_timeout_s)
        logger.info("Waiting for in-flight requests to complete.")  # Triton's words
        await extra.close(left_s)
        runner.shutdown_timeout_s = left_s
        with contextlib.suppress(Exception):
            await runner.cleanup()


@dataclasses.dataclass
class _TritonPorts:
    """The gRPC server and the metrics port of one `thaw up`, and their announcement lines."""

    lines: list[str]
    grpc: Any = None  # grpc.aio.Server
    surface: Any = None  # activator.surfaces.grpc_surface.GrpcSurface
    metrics: Any = None  # aiohttp AppRunner
    metrics_listener: Any = None  # asyncio.Server

    async def close(self, grace_s: float) -> None:
        """Stop the gRPC server (calls in flight get `grace_s`), then the metrics port."""
        if self.grpc is not None:
            await self.grpc.stop(grace_s)
        if self.surface is not None:
            await self.surface.forwarder.close()
        if self.metrics_listener is not None:
            self.metrics_listener.close()
        if self.metrics is not None:
            await self.metrics.cleanup()


async def _start_triton_ports(
    config: ActivatorConfig, app: Any, grpc_bound: tuple[Any, str] | None
) -> _TritonPorts:
    """Start the bound gRPC server and bind the metrics port the config asks for; OSError
    names one that failed."""
    from aiohttp import web

    from activator.surfaces.app import CONNECTIONS, FLEET, SETTINGS, SHARED_MEMORY, metrics_app
    from thawwire.handoff_protocol import Surface, surface_line

    ports = _TritonPorts(lines=[])
    try:
        if grpc_bound is not None:
            from activator.surfaces.grpc_surface import GrpcSurface, start_grpc_server

            ports.grpc, address = grpc_bound
            ports.surface = GrpcSurface(app[FLEET], app[SHARED_MEMORY], settings=app[SETTINGS])
            await start_grpc_server(ports.grpc, ports.surface)
            ports.lines.append(surface_line(Surface.GRPC, address))
            tls = config.grpc_tls
            logger.info(
                "Started GRPCInferenceService at %s%s", address,
                "" if tls is None else " (TLS, client certificates required)" if tls.mutual
                else " (TLS)",
            )  # fmt: skip
        if config.metrics_port is not None:
            metrics = metrics_app(app[FLEET])
            ports.metrics = web.AppRunner(metrics, access_log=None)
            await ports.metrics.setup()
            factory = metrics[CONNECTIONS].protocol_factory(ports.metrics.server)
            host = config.metrics_host or config.host
            try:
                ports.metrics_listener = await asyncio.get_running_loop().create_server(
                    factory, host, config.metrics_port
                )
            except OSError as exc:
                raise OSError(
                    f"cannot listen on {host}:{config.metrics_port}: {exc.strerror or exc}"
                ) from exc
            bound = ports.metrics_listener.sockets[0].getsockname()[1]
            ports.lines.append(surface_line(Surface.METRICS, f"http://{host}:{bound}"))
            logger.info("Started Metrics Service at %s:%d", host, bound)
    except BaseException:
        await ports.close(0)
        raise
    return ports


def _bind(config: ActivatorConfig) -> tuple[socket.socket, tuple[Any, str] | None, BoundAddresses]:
    """Bind the listen address and the gRPC port (not yet serving) before the app starts:
    replicas (the warm pool starts with the app) are told where the front doors are, which
    `--port 0` / `--grpc-port 0` only fix here. Returns the listener, the bound gRPC server
    and its address (None: no gRPC port) and the addresses; ListenError names a failure."""
    try:
        listener = _listen(config.host, config.port, reuse_port=config.reuse_http_port)
    except OSError as exc:  # port taken, address not local or not resolvable
        reason = exc.strerror or str(exc)
        raise ListenError(f"cannot listen on {config.host}:{config.port}: {reason}") from None
    grpc_bound: tuple[Any, str] | None = None
    grpc_port: int | None = None
    if config.grpc_port is not None:
        try:
            grpc_bound = _bind_grpc(config)
        except OSError as exc:
            listener.close()
            raise ListenError(str(exc)) from None
        grpc_port = int(grpc_bound[1].rsplit(":", 1)[1])
    bound = BoundAddresses(
        http_port=listener.getsockname()[1],
        grpc_port=grpc_port,
        front_door_url=_front_door_url(listener),
        # A TLS front door is not one a replica's plaintext channel can reach: its BLS
        # streams then go as HTTP infers (runtime.direct.front_door).
        front_door_grpc=_front_door_grpc(config.grpc_host or config.host, grpc_port)
        if config.grpc_tls is None
        else None,
    )
    return listener, grpc_bound, bound


def _listen(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    """A listening TCP socket on the first address `host` resolves to; with `reuse_port`
    (`--reuse-http-port`) SO_REUSEPORT is set, so other servers may listen on the port too."""
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    return socket.create_server(address[:2], family=family, backlog=1024, reuse_port=reuse_port)


def _bind_grpc(config: ActivatorConfig) -> tuple[Any, str]:
    from activator.surfaces.grpc_surface import bind_grpc_server

    assert config.grpc_port is not None
    return bind_grpc_server(
        config.grpc_host or config.host, config.grpc_port,
        max_message_bytes=config.max_body_bytes, limits=config.connections,
        compression_level=config.grpc_response_compression_level,
        keepalive=config.grpc_keepalive, tls=config.grpc_tls, reuse_port=config.reuse_grpc_port,
    )  # fmt: skip


def _front_door_grpc(host: str, port: int | None) -> str | None:
    """How a local replica reaches the gRPC front door (HOST:PORT); None when it is off."""
    if port is None:
        return None
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _front_door_url(listener: socket.socket) -> str:
    """How a local replica reaches the listener (a wildcard address means loopback)."""
    host, port = listener.getsockname()[:2]
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
