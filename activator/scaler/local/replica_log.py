"""A local replica's standard error, line by line, as records of `thaw up`'s own log.

A replica (`thaw serve`) writes its log to standard error as tritonserver's records, in one of
the two formats of `thawserver.log_control` (`I1205 12:21:56.976943 pid file:line] "message"`,
or ISO8601's `2026-12-05T12:21:56Z I pid file:line] "message"`), under the log settings
`thaw up` keeps and pushes to it; what it printed is what those settings let through. `thaw up`
logs each record again under its own handler (standard error or `--log-file`, its format), at
the record's severity, with the replica's process id, file and line and its message (escaped
again by `thaw up`'s formatter, not twice): a Python model's `pb_utils.Logger` lines, a
replica's warnings and a crash's traceback end up in the one log an operator reads, as in
tritonserver's. Lines that are no record (a traceback, a library's print) are warnings, as
they are. Pure: `parse` is the whole rule.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from dataclasses import dataclass

__all__ = ["ReplicaLine", "parse"]

_DEFAULT = re.compile(r"^([IWEV])\d{4} \d\d:\d\d:\d\d\.\d{6} (\d+) ([^\s:]+):(\d+)\] (.*)$")
_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ([IWEV]) (\d+) ([^\s:]+):(\d+)\] (.*)$")
_LEVELS = {"I": logging.INFO, "V": logging.INFO, "W": logging.WARNING, "E": logging.ERROR}


@dataclass(frozen=True, slots=True)
class ReplicaLine:
    """One line of a replica's standard error: its severity and message, and for a record the
    replica's process id and the source file and line that logged it."""

    level: int
    message: str
    pid: int | None = None
    file: str = ""
    line: int = 0


def parse(text: str, *, escaped: bool = True) -> ReplicaLine:
    """The record `text` holds, its message unescaped when the replica escapes messages
    (`escaped`: both processes read TRITON_SERVER_ESCAPE_LOG_MESSAGES from one environment);
    WARNING and the text as it is for a line that is no record."""
    match = _DEFAULT.match(text) or _ISO.match(text)
    if match is None:
        return ReplicaLine(logging.WARNING, text)
    letter, pid, file, line, message = match.groups()
    if escaped and len(message) >= 2 and message[0] == '"' and message[-1] == '"':
        with contextlib.suppress(ValueError):  # not one escaped string: kept as it came
            message = json.loads(message)
    return ReplicaLine(_LEVELS[letter], str(message), int(pid), file, int(line))
