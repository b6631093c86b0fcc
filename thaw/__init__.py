"""The `thaw` command: one entry point that dispatches to the runtime, activator and snapshotter.

    cli     `thaw <command>` -> the package that owns the command, imported lazily

Exports nothing: `thaw = "thaw.cli:main"` is the console script.
"""

from __future__ import annotations

__all__: list[str] = []
