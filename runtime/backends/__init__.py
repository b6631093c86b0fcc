"""Model backends behind one Protocol; `backend_class` maps a config's backend name to its class."""

from __future__ import annotations

from runtime.backends.base import Backend, ExecTimings, LoadContext
from runtime.backends.registry import backend_class

__all__ = ["Backend", "ExecTimings", "LoadContext", "backend_class"]
