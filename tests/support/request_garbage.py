"""How many aiohttp requests the garbage collector has to free: 0 when each request is freed as
it is answered, all of them when a reference cycle runs through each one."""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable

from aiohttp import web


async def requests_left_to_collector(send: Callable[[], Awaitable[None]], times: int) -> int:
    """Await `send()` `times` times with the collector off, then count the `web.BaseRequest`s
    among what a collection finds (kept in gc.garbage with DEBUG_SAVEALL, then dropped)."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(times):
            await send()
        gc.collect()
        return sum(isinstance(o, web.BaseRequest) for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
