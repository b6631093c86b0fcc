"""Flag defaults handed through the environment (`thaw up` to each local replica's `thaw
serve`, or an operator setting the variable): read as the flag itself would be.

A value the flag would refuse is refused, naming the variable — it is never quietly replaced
by the built-in default, which is what an operator who set `THAW_DEFAULT_MAX_TOKENS=2k` would
otherwise get without a word. argparse converts a flag's string default with the flag's
`type` when the flag is not given, so the handed text is that default (`HandedDefault`, a
`str` that remembers its variable) and `whole_number` is the flag's type.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

__all__ = ["HandedDefault", "handed", "whole_number"]


class HandedDefault(str):
    """A flag's default text, as read from the environment variable `variable`."""

    variable: str

    def __new__(cls, text: str, variable: str) -> HandedDefault:
        handed_text = super().__new__(cls, text)
        handed_text.variable = variable
        return handed_text


def handed(environ: Mapping[str, str], variable: str) -> HandedDefault | None:
    """`variable`'s text in `environ` as a flag default; None when unset or empty."""
    text = environ.get(variable, "")
    return HandedDefault(text, variable) if text else None


def whole_number(text: str) -> int:
    """argparse `type` of a count flag: `text` as an int; a handed default that is not one is
    refused in the variable's name (argparse adds the flag's)."""
    try:
        return int(text)
    except ValueError:
        if isinstance(text, HandedDefault):
            raise argparse.ArgumentTypeError(
                f"${text.variable}={text!r} (its default, handed through the environment) "
                "is not a whole number"
            ) from None
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
