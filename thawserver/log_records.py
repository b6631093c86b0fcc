"""tritonserver 2.51's log records, as every Thaw process writes them (thawserver.log_control
governs the server's; a Python model's stub and `thaw up`'s first lines use them as they are).

    I1205 12:21:56.976943 5339 model.py:6] "init info"      (--log-format default)
    2026-12-05T12:21:56Z I 5339 model.py:6] "init info"     (--log-format ISO8601)

A one-letter severity (a verbose line is an I record), the time in UTC, the process id, the
source file and line (a Python model's own `model.py:N` for its `pb_utils.Logger` lines), then
the message, quoted, with its quotes, backslashes and control characters escaped, so that a
record is one line and no text a client sent (a tensor name in an error) can forge a record of
its own. `TRITON_SERVER_ESCAPE_LOG_MESSAGES=0` in the environment turns the escaping off, as it
does for tritonserver. Standard library only: a stub's interpreter may hold nothing else.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["ESCAPE_ENV", "TABLE", "TritonRecord", "escapes_messages", "log_to_stderr", "table"]

# tritonserver's switch for the messages' escaping: "0" turns it off, anything else leaves it on.
ESCAPE_ENV = "TRITON_SERVER_ESCAPE_LOG_MESSAGES"
# A record's table (`logger.info("", extra={TABLE: table(...)})`): written after its heading
# on lines of its own, as Triton's start-up tables are; its cells were escaped by `table`.
TABLE = "thaw_table"
_LETTERS = {logging.DEBUG: "I", logging.INFO: "I", logging.WARNING: "W", logging.ERROR: "E"}


def escapes_messages(environ: Mapping[str, str] | None = None) -> bool:
    """Whether records quote and escape their message (tritonserver's rule: unless the
    environment sets TRITON_SERVER_ESCAPE_LOG_MESSAGES to "0")."""
    return (os.environ if environ is None else environ).get(ESCAPE_ENV) != "0"


class TritonRecord(logging.Formatter):
    """tritonserver 2.51's log record, the default format or ISO8601's. A record's traceback
    (Thaw's own, from `logger.exception`) is part of its message, escaped with it; unescaped, it
    follows on lines of its own, as Triton's unescaped messages do."""

    def __init__(self, *, iso8601: bool = False, escaped: bool = True) -> None:
        super().__init__()
        self.iso = iso8601
        self.escaped = escaped

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            message += "\n" + self.formatStack(record.stack_info)
        rows = record.__dict__.get(TABLE)
        if self.escaped and (message or not rows):  # a table's empty heading stays empty
            message = json.dumps(message, ensure_ascii=False)
        if rows:
            message += "\n" + rows
        level = record.levelno
        letter = _LETTERS.get(level) or ("E" if level > logging.ERROR else "I")
        utc = time.gmtime(record.created)
        if self.iso:
            stamp = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', utc)} {letter}"
        else:
            micros = int((record.created % 1) * 1_000_000)
            stamp = f"{letter}{time.strftime('%m%d %H:%M:%S', utc)}.{micros:06d}"
        return f"{stamp} {record.process} {record.filename}:{record.lineno}] {message}"


def log_to_stderr(level: int | str) -> None:
    """The root logger to standard error as Triton's default records, at `level`: a process
    without log settings of its own (a stub; `thaw up` until its settings are read)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TritonRecord(escaped=escapes_messages()))
    logging.basicConfig(level=level, handlers=[handler])


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Triton's table_printer layout: `+---+` borders around the header and the rows, each
    column as wide as its widest cell. As Triton's, a cell is written as it is (quotes and all:
    qa/L0_rate_limiter greps a reason's `"resource1"` in the model table) and a cell of several
    lines goes on over lines of its own, the other columns blank there, so every line of the
    table starts with `|` or `+` and none can pass for a record; other control characters are
    escaped."""
    grid = [list(header), *[list(row) for row in rows]]
    split = [[_cell(c).rstrip("\n").split("\n") for c in row] for row in grid]
    widths = [max(len(line) for row in split for line in row[i]) for i in range(len(header))]
    border = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    body = []
    for row in split:
        for k in range(max(len(cell) for cell in row)):
            parts = [
                (cell[k] if k < len(cell) else "").ljust(w)
                for cell, w in zip(row, widths, strict=True)
            ]
            body.append("| " + " | ".join(parts) + " |")
    heading = max(len(cell) for cell in split[0])
    return "\n".join([border, *body[:heading], border, *body[heading:], border])


def _cell(text: str) -> str:
    """`text` with its control characters but newlines escaped (a tab or carriage return would
    misalign or overwrite the table)."""
    return "".join(c if c == "\n" or c.isprintable() else _escaped(c) for c in text)


def _escaped(char: str) -> str:
    return json.dumps(char)[1:-1]  # `\t`, `\u2028`: visible, on the cell's line
