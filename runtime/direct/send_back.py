"""The way back to `thaw up`'s front door for a request a handler finds is not this replica's.

A request on a connection `thaw up` handed to this replica (runtime.direct.routing) that names
the client's shared-memory regions cannot be answered here: the activator owns its clients'
regions (replicas come and go). runtime.direct.routing leaves, under `SEND_BACK` in each such
request, a call that forwards a request with its already-read body to the front door and
streams the answer to the client; a handler that finds the regions returns what it returns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

__all__ = ["SEND_BACK", "SendBack"]

SendBack = Callable[[web.Request, bytes], Awaitable[web.StreamResponse]]
"""Forward the request, with this body, to the front door; its answer, already sent. The
request is an argument, not bound in: a request holding a call that held it would be a cycle,
freed only by the garbage collector (measured: a tenth more CPU per handed-off request)."""

SEND_BACK: Any = (
    web.RequestKey("thaw.send_back")
    if hasattr(web, "RequestKey")  # aiohttp >= 3.14: a str key is warned about once
    else "thaw.send_back"
)
"""The request key (aiohttp requests are mappings) of a handed-off request's way back."""
