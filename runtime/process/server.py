"""Run one v2 server as a process: bind its listeners, announce them, drain on SIGTERM.

Listeners: the v2 HTTP application, the gRPC service (runtime.grpc.server), Triton's metrics
port, SageMaker's and Vertex AI's (runtime.process.cloud_ports: the v2 application's requests
too), each as its `--allow-*` flag says; HTTP's and gRPC's shared with other servers on their
port as `--reuse-http-port` / `--reuse-grpc-port` say (thawserver.reuse_port_flags). Their
`THAW_LISTENING*` lines are printed once all accept connections, the HTTP one last
(thawwire.handoff_protocol).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from runtime.config import ServeConfig
from runtime.direct.handoff import HandoffReceiver
from runtime.direct.routing import DIRECT_ROUTING
from runtime.direct.state import ConnectionStates
from runtime.errors import ServingError
from runtime.http.app import (
    CONNECTIONS,
    HANDLERS,
    MODELS,
    RUNNER_OPTIONS,
    SERVER_STATE,
    build_metrics_app,
)
from runtime.models.manager import ModelManager
from runtime.process.cloud_ports import CloudPorts
from runtime.process.front_control import FrontControl
from runtime.process.native_front import (
    GRPC_SOCKET,
    NativeFront,
    grpc_refusal,
    private_socket_dir,
)
from thawserver.aiohttp_compat import JsonErrorRunner
from thawserver.connection_drain import DRAIN_IDLE_TIMEOUT_S, count_down_connections
from thawserver.grpc_bind import bind_problem
from thawwire.handoff_protocol import Surface, listening_line, surface_line

__all__ = ["serve_app"]

logger = logging.getLogger(__name__)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def _listen(
    server: web.Server, app: web.Application, host: str, port: int, *, reuse_port: bool = False
) -> tuple[asyncio.Server, str]:
    """Serve `server` (a runner's, of `app`) on host:port, each connection under the app's
    ConnectionGuard; the listener and its URL (the port chosen when 0). ServingError says why
    not. `reuse_port`: with SO_REUSEPORT (`--reuse-http-port`), sharing the port with others."""
    factory = app[CONNECTIONS].protocol_factory(server)
    try:
        listener = await asyncio.get_running_loop().create_server(
            factory, host, port, backlog=1024, reuse_port=reuse_port or None
        )
    except OSError as exc:
        # The system's reason ("Address already in use"), not asyncio's wrapping of it.
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ServingError(f"cannot listen on {host}:{port}: {why}") from exc
    bound = listener.sockets[0].getsockname()[1]
    return listener, f"http://{_url_host(host)}:{bound}"


async def _listen_private(server: web.Server, app: web.Application) -> tuple[asyncio.Server, Path]:
    """Serve `server` on a Unix socket in a new private directory (the native front's
    upstream), each connection under the app's ConnectionGuard; the listener and directory."""
    directory = private_socket_dir()
    factory = app[CONNECTIONS].protocol_factory(server)
    listener = await asyncio.get_running_loop().create_unix_server(
        factory, str(directory / "serve.sock"), backlog=1024
    )
    return listener, directory


def _front_takes_grpc(config: ServeConfig, grpc_routes: Any | None) -> bool:
    """Whether the native front takes the gRPC port (decision 0032 phase 3): it does where it
    takes the HTTP port and serves every gRPC setting in force; else the port stays the Python
    gRPC server's, saying why once."""
    if not (config.allow_grpc and grpc_routes is not None):
        return False
    if not (config.allow_http and config.http_front == "native"):
        return False
    why = grpc_refusal(config)
    if why is not None:
        logger.info(
            "the gRPC port stays the Python gRPC server's: the native front does not serve %s", why
        )
        return False
    return True


def _grpc_host(host: str) -> str:
    """`host` as the gRPC surface announces it (thawserver.grpc_bind: IPv6 in brackets)."""
    return f"[{host}]" if ":" in host else host


async def serve_app(
    app: web.Application, config: ServeConfig, *, grpc_routes: Any | None = None
) -> int:
    """Serve until SIGTERM/SIGINT (exit 0) or a failed start (exit 1), then shut down gracefully.

    `grpc_routes` is the gRPC surface's generic handler (runtime.grpc.handlers), served when
    `allow_grpc`. Shutdown stops accepting; standalone, it serves the HTTP connections clients
    hold open until they close or `exit_timeout_s` runs out (thawserver.connection_drain); then
    in-flight requests (gRPC's, then HTTP's) finish within what is left, and the model manager
    stops (the app's cleanup context).
    """
    state = app[SERVER_STATE]
    options = dict(RUNNER_OPTIONS)
    if config.log_level == "debug":
        # One log line per request costs more than the rest of a small request: debug only.
        options["access_log"] = logging.getLogger("aiohttp.access")
    # Requests aiohttp cannot parse are answered in JSON, as every other error.
    runner = JsonErrorRunner(
        app, **options, shutdown_timeout=config.exit_timeout_s, handle_signals=False
    )
    # Before the app's startup: a signal during it stops the server once it has started
    # (as `thaw up`'s), instead of ending it by KeyboardInterrupt or SIGTERM's default.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await runner.setup()
    assert runner.server is not None  # set up
    routing = app.get(DIRECT_ROUTING)  # installed when `thaw up` hands connections over
    receiver: HandoffReceiver | None = None
    grpc_server = None
    clouds = CloudPorts(config, app, runner.server, _listen)
    metrics_runner: web.AppRunner | None = None
    listeners: list[asyncio.Server] = []
    front: NativeFront | None = None
    try:
        announcements: list[str] = []
        try:
            front_grpc = _front_takes_grpc(config, grpc_routes)
            if config.allow_grpc and grpc_routes is not None and not front_grpc:
                from runtime.grpc.server import GrpcServer  # grpc only where it is served

                grpc_server = GrpcServer(config, grpc_routes)
                announcements.append(surface_line(Surface.GRPC, await grpc_server.start()))
            if config.allow_metrics:
                metrics_app = build_metrics_app(config, app[HANDLERS])
                metrics_runner = web.AppRunner(metrics_app, access_log=None)
                await metrics_runner.setup()
                assert metrics_runner.server is not None  # set up
                listener, url = await _listen(
                    metrics_runner.server, metrics_app, config.metrics_host or config.host,
                    config.metrics_port,
                )  # fmt: skip
                listeners.append(listener)
                announcements.append(surface_line(Surface.METRICS, url))
                logger.info("Started Metrics Service at %s", url.split("//", 1)[1])
            http_url = None
            if config.allow_http and config.http_front == "native":
                listener, socket_dir = await _listen_private(runner.server, app)
                listeners.append(listener)
                grpc_port: tuple[str, int, bool] | None = None
                if front_grpc:
                    from runtime.grpc.server import GrpcServer  # grpc only where it is served

                    grpc_host = config.grpc_host or config.host
                    problem = bind_problem(
                        grpc_host, config.grpc_port, reuse_port=config.reuse_grpc_port
                    )
                    if problem is not None:
                        where = f"{_grpc_host(grpc_host)}:{config.grpc_port}"
                        raise OSError(f"cannot listen for gRPC on {where}: {problem}")
                    grpc_server = GrpcServer(
                        config, grpc_routes, unix_socket=socket_dir / GRPC_SOCKET
                    )
                    await grpc_server.start()
                    grpc_port = (grpc_host, config.grpc_port, config.reuse_grpc_port)
                front = await NativeFront.start(
                    host=config.host, port=config.port, reuse_port=config.reuse_http_port,
                    socket_dir=socket_dir, limits=config.connections, control=FrontControl(),
                    grpc=grpc_port,
                )  # fmt: skip
                if grpc_port is not None and front.grpc_address is not None:
                    port = front.grpc_address.rpartition(":")[2]
                    address = f"{_grpc_host(grpc_port[0])}:{port}"
                    # First, as the Python gRPC server's line is: the same order either front.
                    announcements.insert(0, surface_line(Surface.GRPC, address))
                    # tritonserver's words: scripts wait for this line.
                    logger.info("Started GRPCInferenceService at %s", address)
                manager = app[MODELS]
                if isinstance(manager, ModelManager):
                    front.answer_hot_models(manager, app[HANDLERS], config)
                http_url = front.url
            elif config.allow_http:
                listener, http_url = await _listen(
                    runner.server, app, config.host, config.port,
                    reuse_port=config.reuse_http_port,
                )  # fmt: skip
                listeners.append(listener)
            await clouds.open()  # SageMaker's and Vertex AI's ports
        except (OSError, ServingError) as exc:
            # A port in use, an address not local: say which, exit 1 (no traceback).
            logger.error("%s", exc)
            state.start_error = exc
            return 1
        if config.handoff_socket is not None and routing is not None:
            assert runner.server is not None  # set up above
            receiver = HandoffReceiver(
                config.handoff_socket,
                runner.server,  # handed-off connections share the server: one drain for all
                routing,
                states=ConnectionStates(config.handoff_state),
                accepting=lambda: state.accepting,
                wrap=app[CONNECTIONS].wrap,  # the HTTP port's deadlines hold for them too
            )
            receiver.start()
        # The activator reads these lines from a replica's stdout to learn its addresses.
        for line in announcements:
            print(line, flush=True)
        if http_url is not None:
            print(listening_line(http_url), flush=True)
            # tritonserver's words (`HOST:PORT`): scripts wait for this line.
            logger.info("Started HTTPService at %s", http_url.split("//", 1)[1])
        stopper = asyncio.create_task(stop.wait())
        failer = asyncio.create_task(state.failed.wait())
        watched: set[asyncio.Task[object]] = {stopper, failer}
        if front is not None:  # a front that dies takes the HTTP port with it: exit 1
            watched.add(asyncio.create_task(front.exited(state)))
        await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        for task in watched:
            task.cancel()
    finally:
        state.accepting = False
        state.stopping = True
        logger.info("shutting down (in-flight requests get %.1fs)", config.exit_timeout_s)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await clouds.close()
        remaining_s = config.exit_timeout_s
        if front is not None:
            # The clients' connections are the front's: it stops accepting and drains them as
            # the countdown below does its own (their requests reach the application meanwhile).
            remaining_s = await front.stop(remaining_s, DRAIN_IDLE_TIMEOUT_S)
            runner.shutdown_timeout_s = remaining_s
        for listener in listeners:
            listener.close()  # stop accepting; the runners below drain their connections
        if config.front_door is None and state.start_error is None and front is None:
            # Standalone, as tritonserver: the clients' open connections are served until they
            # close or the exit timeout runs out. A replica behind `thaw up` skips it: the
            # activator stopped routing to it, and its pooled connections are no clients.
            guard = app[CONNECTIONS]
            guard.start_draining(idle_timeout_s=DRAIN_IDLE_TIMEOUT_S)
            remaining_s = await count_down_connections(lambda: guard.open, remaining_s)
            runner.shutdown_timeout_s = remaining_s
        logger.info("Waiting for in-flight requests to complete.")  # Triton's words
        if grpc_server is not None:
            await grpc_server.stop(remaining_s)
        await clouds.shutdown(remaining_s)
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        await runner.cleanup()  # drains handed-off connections too: they share the server
        if front is not None:
            await front.close()  # after the models' finalize(): it relayed their stubs
        if receiver is not None:
            await receiver.close()  # after the drain: it reports every connection ended
        if state.start_error is not None:
            # Why the start failed is the last line, after the shutdown's log, as `thaw up`
            # says it (exit 1).
            error = state.start_error
            reason = (
                error.message
                if isinstance(error, ServingError)
                else error.strerror or str(error)  # without "[Errno 98]"
                if isinstance(error, OSError)
                else str(error)
            )
            print(f"thaw serve: error: {reason}", file=sys.stderr, flush=True)
    return 1 if state.start_error is not None else 0
