"""A local replica's standard error, line by line, as records of `thaw up`'s own log.

A replica (`thaw serve`) writes its log to standard error in one of the two formats of
`thawserver.log_control` (the default `date time,ms LEVEL logger: message`, or Triton's ISO8601
`timeZ L pid file:line] message`), under the log settings `thaw up` keeps and pushes to it;
what it printed is what those settings let through. `thaw up` logs each line again under its
own handler (standard error or `--log-file`, its format), at the line's severity, named for the
replica: a Python model's `pb_utils.Logger` lines, a replica's warnings and a crash's traceback
end up in the one log an operator reads, as in tritonserver's. Lines of neither format (a
traceback, a library's print) are warnings. Pure: `parse` is the whole rule.
"""

from __future__ import annotations

import logging
import re

__all__ = ["parse"]

_DEFAULT = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+): (.*)$"
)
_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ([DIWEC]) \d+ (\S+?)\] (.*)$")
_LEVELS = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
}
_LETTERS = {name[0]: level for name, level in _LEVELS.items()}


def parse(line: str) -> tuple[int, str]:
    """The severity of a replica's log line and its text without the replica's own time and
    severity (its logger or source file kept); WARNING and the line as it is otherwise."""
    match = _DEFAULT.match(line)
    if match is not None:
        level, name, message = match.groups()
        return _LEVELS[level], f"{name}: {message}"
    match = _ISO.match(line)
    if match is not None:
        letter, where, message = match.groups()
        return _LETTERS[letter], f"{where}] {message}"
    return logging.WARNING, line
