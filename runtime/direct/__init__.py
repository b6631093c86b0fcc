"""Direct connections: the client connections `thaw up` hands a replica, and the way back.

    handoff            take the connections handed over a Unix socket, report their load
    protocol           the asyncio protocol of one handed-off connection (aiohttp's handler)
    routing            this replica's models answered here, everything else sent back
    state              each handed-off connection's state byte, in a file `thaw up` maps too
    load               in-flight requests on handed-off connections, as load reports say
    send_back          the way back to the front door for a request not this replica's
    front_door         the one client back to `thaw up`'s front door: forwards, BLS, ensemble steps
    infer_wire         an inference as sent to the front door (v2 binary), and its answer read back

Exports `HandoffReceiver`, `DirectRouting` and `FrontDoor`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.direct.front_door import FrontDoor
    from runtime.direct.handoff import HandoffReceiver
    from runtime.direct.routing import DirectRouting

__all__ = ["DirectRouting", "FrontDoor", "HandoffReceiver"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "DirectRouting": "runtime.direct.routing",
    "FrontDoor": "runtime.direct.front_door",
    "HandoffReceiver": "runtime.direct.handoff",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
