"""A message about settings ("`port` = 70000, ...", "`log_format` = 'json': ...") with each
setting named as its flag is typed ("`--port`", "`--log-format`"), for both CLIs.

Config classes (runtime.config, activator.config) name their fields; a user typed flags. A
setting becomes its flag when one of the command's flags sets it (`dest`) and is spelled
`--dest-with-dashes`; a setting no flag sets keeps its own name.
"""

from __future__ import annotations

import argparse
import re

__all__ = ["as_typed"]

_NAMED = re.compile(r"`([a-z][a-z0-9_]*)`")


def as_typed(message: str, command: argparse.ArgumentParser) -> str:
    """`message` with each setting its `command`'s flags set named as the flag."""
    flags = {
        action.dest: option
        for action in command._actions
        for option in action.option_strings[:1]
        if option == f"--{action.dest.replace('_', '-')}"
    }

    def typed(match: re.Match[str]) -> str:
        flag = flags.get(match.group(1))
        return f"`{flag}`" if flag is not None else match.group(0)

    return _NAMED.sub(typed, message)
