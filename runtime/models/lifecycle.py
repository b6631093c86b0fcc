"""Server lifecycle: warm-up imports, manager start/stop as an app-scoped resource, readiness."""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from runtime.errors import ServingError

__all__ = ["ServerState", "lifecycle_context"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class ServerState:
    """What readiness depends on besides the models: warm-up done, and not shutting down."""

    accepting: bool = False
    stopping: bool = False  # shutting down: open streams begin no new request
    start_error: BaseException | None = None
    stopped_cleanly: bool = True
    failed: asyncio.Event = field(default_factory=asyncio.Event)
    # Set once the start is done (the models to load at start loaded): `accepting` turned on.
    started: asyncio.Event = field(default_factory=asyncio.Event)


async def preload(
    frameworks: tuple[str, ...], warmups: tuple[Callable[[], object], ...] = ()
) -> None:
    """Import heavy frameworks (then run other warm-ups) in a thread, off the request path."""
    loop = asyncio.get_running_loop()
    for name in frameworks:
        started = loop.time()
        await asyncio.to_thread(importlib.import_module, name)
        logger.info("preloaded framework %s in %.2fs", name, loop.time() - started)
    for warmup in warmups:
        started = loop.time()
        await asyncio.to_thread(warmup)
        logger.info(
            "warm-up %s done in %.2fs",
            getattr(warmup, "__qualname__", warmup),
            loop.time() - started,
        )


def lifecycle_context(
    state: ServerState,
    *,
    frameworks: tuple[str, ...],
    warmups: tuple[Callable[[], object], ...] = (),
    start: Callable[[], Awaitable[None]],
    stop: Callable[[], Awaitable[None]],
    stop_timeout_s: float,
    exit_on_failure: bool = True,
    prepare: Callable[[], None] = lambda: None,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup_ctx: warm up and start the manager in the background, stop it on cleanup.

    Starting in the background lets `/v2/health/live` answer while models load; readiness
    waits for `state.accepting`. `prepare` runs first, before the frameworks' preload: what
    a load call needs (the manager's Python-models host) is there from the first moment. A
    failed start sets `state.failed` so the server exits 1; without `exit_on_failure`
    (tritonserver's `--exit-on-error=false`) the server goes on answering, neither live nor
    ready, as Triton's does when it fails to initialize.
    Stopping gets `stop_timeout_s`; a model stuck in `execute` cannot hold the process past it
    (`state.stopped_cleanly` turns False and the entry point exits without waiting).
    """

    async def warm_up() -> None:
        try:
            prepare()
            await preload(frameworks, warmups)
            await start()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            state.start_error = exc
            if exit_on_failure:
                if isinstance(exc, ServingError):  # a model's fault, said in its words
                    logger.error("server start failed: %s", exc.message)
                else:
                    logger.exception("server start failed")
                state.failed.set()
            else:
                logger.error("server failed to initialize: %s; serving, not live", exc)
            return
        state.accepting = True
        state.started.set()
        logger.info("server ready")

    async def context(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(warm_up(), name="thaw-warm-up")
        yield
        state.accepting = False
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        try:
            await asyncio.wait_for(stop(), timeout=stop_timeout_s)
        except TimeoutError:
            state.stopped_cleanly = False
            logger.warning("models did not unload within %.1fs; exiting anyway", stop_timeout_s)

    return context
