"""What the garbage collector has to free after a run of requests: nothing of a request when
each one is freed as it is answered; all of it when a reference cycle runs through each one."""

from __future__ import annotations

import gc
import types
from collections.abc import Awaitable, Callable

from aiohttp import web

# Thaw's own top-level packages (pyproject.toml's import-linter root packages but `thaw`,
# whose CLI has no per-request objects).
_THAW_PACKAGES = frozenset(
    {"activator", "runtime", "snapshotter", "thawserver", "thawwire", "tritonconfig"}
)


async def left_to_collector(send: Callable[[], Awaitable[None]], times: int) -> list[object]:
    """Await `send()` `times` times with the collector off; what a collection then finds
    (everything in the unreachable cycles, kept with DEBUG_SAVEALL), as a new list."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(times):
            await send()
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


async def requests_left_to_collector(send: Callable[[], Awaitable[None]], times: int) -> int:
    """The aiohttp requests (`web.BaseRequest`) among what `left_to_collector` finds."""
    return sum(isinstance(o, web.BaseRequest) for o in await left_to_collector(send, times))


def thaw_objects(found: list[object]) -> list[str]:
    """The names of what among `found` is Thaw's own: instances of its classes, and its
    functions (closures, bound methods' functions)."""
    names = []
    for o in found:
        if isinstance(o, types.MethodType):
            o = o.__func__
        if isinstance(o, types.FunctionType):
            module, name = o.__module__, o.__qualname__
        else:
            module, name = type(o).__module__, type(o).__qualname__
        if module.partition(".")[0] in _THAW_PACKAGES:
            names.append(f"{module}.{name}")
    return names
