"""Run one v2 application as a process: bind, announce `THAW_LISTENING`, drain on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal

from aiohttp import web

from runtime.app import MANAGER, RUNNER_OPTIONS, SERVER_STATE
from runtime.config import ServeConfig
from runtime.direct_state import ConnectionStates
from runtime.errors import ServingError
from runtime.front_door_client import FrontDoorClient
from runtime.handoff import HandoffReceiver
from runtime.parse_errors import JsonParseErrorRunner

__all__ = ["LISTENING_PREFIX", "serve_app"]

logger = logging.getLogger(__name__)

# The activator reads this line from a replica's stdout to learn its port.
LISTENING_PREFIX = "THAW_LISTENING"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def serve_app(app: web.Application, config: ServeConfig) -> int:
    """Serve until SIGTERM/SIGINT (exit 0) or a failed start (exit 1), then shut down gracefully.

    Shutdown stops accepting, lets in-flight requests finish within `exit_timeout_s`, then
    stops the model manager (the app's cleanup context).
    """
    state = app[SERVER_STATE]
    options = dict(RUNNER_OPTIONS)
    if config.log_level == "debug":
        # One log line per request costs more than the rest of a small request: debug only.
        options["access_log"] = logging.getLogger("aiohttp.access")
    runner = JsonParseErrorRunner(
        app, **options, shutdown_timeout=config.exit_timeout_s, handle_signals=False
    )
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    receiver: HandoffReceiver | None = None
    front_door: FrontDoorClient | None = None
    try:
        site = web.TCPSite(runner, config.host, config.port, backlog=1024)
        await site.start()
        if config.handoff_socket is not None and config.front_door is not None:
            front_door = FrontDoorClient(config.front_door, timeout_s=config.exit_timeout_s + 300)
            receiver = _handoff_receiver(app, runner, config, front_door)
            receiver.start()
        port = runner.addresses[0][1]
        print(f"{LISTENING_PREFIX} http://{_url_host(config.host)}:{port}", flush=True)
        logger.info("listening on %s:%d", config.host, port)
        stopper = asyncio.create_task(stop.wait())
        failer = asyncio.create_task(state.failed.wait())
        await asyncio.wait({stopper, failer}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        failer.cancel()
    finally:
        state.accepting = False
        logger.info("shutting down (in-flight requests get %.1fs)", config.exit_timeout_s)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await runner.cleanup()  # drains handed-off connections too: they share the server
        if receiver is not None:
            await receiver.close()  # after the drain: it reports every connection ended
        if front_door is not None:
            await front_door.close()
    return 1 if state.start_error is not None else 0


def _handoff_receiver(
    app: web.Application, runner: web.AppRunner, config: ServeConfig, front_door: FrontDoorClient
) -> HandoffReceiver:
    """Connections `thaw up` hands over are served by this runner's own server."""
    manager, state = app[MANAGER], app[SERVER_STATE]
    assert runner.server is not None and config.handoff_socket is not None  # set up above

    def is_loaded(model: str) -> bool:
        try:
            return manager.model_ready(model, None)
        except ServingError:
            return False

    return HandoffReceiver(
        config.handoff_socket,
        runner.server,
        is_loaded=is_loaded,
        front_door=front_door,
        max_age_s=config.handoff_max_age_s,
        states=ConnectionStates(config.handoff_state),
        accepting=lambda: state.accepting,
    )
