"""tritonserver's boolean flag values, for both CLIs: `true|false|1|0|on|off|yes|no`, any case.

triton_bool(text) -> bool   (argparse.ArgumentTypeError names a value that is neither)
"""

from __future__ import annotations

import argparse

__all__ = ["triton_bool"]

_TRUE = frozenset({"true", "1", "on", "yes"})
_FALSE = frozenset({"false", "0", "off", "no"})


def triton_bool(text: str) -> bool:
    """A tritonserver boolean option value (`true|false|1|0|on|off|yes|no`, any case)."""
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (true or false)")
