"""Run one v2 application as a process: bind, announce `THAW_LISTENING`, drain on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal

from aiohttp import web

from runtime.app import RUNNER_OPTIONS, SERVER_STATE
from runtime.config import ServeConfig
from runtime.direct_routing import DIRECT_ROUTING
from runtime.direct_state import ConnectionStates
from runtime.handoff import HandoffReceiver
from thawwire.aiohttp_compat import JsonErrorRunner
from thawwire.handoff_protocol import listening_line

__all__ = ["serve_app"]

logger = logging.getLogger(__name__)


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
    # Requests aiohttp cannot parse are answered in JSON, as every other error.
    runner = JsonErrorRunner(
        app, **options, shutdown_timeout=config.exit_timeout_s, handle_signals=False
    )
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    routing = app.get(DIRECT_ROUTING)  # installed when `thaw up` hands connections over
    receiver: HandoffReceiver | None = None
    try:
        site = web.TCPSite(runner, config.host, config.port, backlog=1024)
        await site.start()
        if config.handoff_socket is not None and routing is not None:
            assert runner.server is not None  # set up above
            receiver = HandoffReceiver(
                config.handoff_socket,
                runner.server,  # handed-off connections share the server: one drain for all
                routing,
                states=ConnectionStates(config.handoff_state),
                accepting=lambda: state.accepting,
            )
            receiver.start()
        port = runner.addresses[0][1]
        # The activator reads this line from a replica's stdout to learn its port.
        print(listening_line(f"http://{_url_host(config.host)}:{port}"), flush=True)
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
        if routing is not None:
            await routing.close()  # its front door client, which those connections used
    return 1 if state.start_error is not None else 0
