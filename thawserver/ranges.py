"""The one range check and its one phrasing: "`--flag` = 3, must be in [6, 3600]".

Every command line and settings file of Thaw bounds its numbers the same way, so a user reads
one message everywhere. Pure: it returns the message and each caller raises its own error
(`ConfigError` of `thaw serve` or `thaw up`, the snapshotter's `BuildError`, ...).
"""

from __future__ import annotations

import math

__all__ = ["number", "out_of_range"]


def number(value: float) -> str:
    """`value` as a message shows it: integers without a decimal point, others shortest."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:g}"


def out_of_range(name: str, value: float, low: float, high: float) -> str | None:
    """None when `low <= value <= high` (and finite), else the message naming `name`."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"`{name}` = {number(value)}, must be in [{number(low)}, {number(high)}]"
    if low <= value <= high:
        return None
    return f"`{name}` = {number(value)}, must be in [{number(low)}, {number(high)}]"
