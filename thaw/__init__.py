"""The `thaw` command: one entry point that dispatches to the runtime, activator and snapshotter."""

from __future__ import annotations

__all__: list[str] = []
