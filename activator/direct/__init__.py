"""Direct connections: the front door that hands client connections to warm replicas.

    front_door      the listening socket: accept, peek, hand off or serve here
    handoff         one replica's handoff socket: send sockets, read load reports
    move_over       keep-alive connections served here, moved to a replica at a request's end
    orphans         the open connections of a replica that died

Exports `FrontDoor` and `HandoffLinks`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from activator.direct.front_door import FrontDoor
    from activator.direct.handoff import HandoffLinks

__all__ = ["FrontDoor", "HandoffLinks"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "FrontDoor": "activator.direct.front_door",
    "HandoffLinks": "activator.direct.handoff",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
