"""This process's Python logging, governed by Triton's log settings (thawwire.log_settings):
where lines go (standard error, or the operator's `--log-file`), which severities pass, the
verbose level (above 0: debug lines too) and the record format, changeable while serving.

Both formats are tritonserver 2.51's records (`--log-format default` and `ISO8601`), so a log
pipeline written for Triton's lines reads Thaw's: a one-letter severity, the time in UTC, the
process id, the source file and line (a Python model's own `model.py:N` for its
`pb_utils.Logger` lines), then the message, quoted, with its quotes, backslashes and control
characters escaped, so that a record is one line and no text a client sent (a tensor name in
an error) can forge a record of its own. `TRITON_SERVER_ESCAPE_LOG_MESSAGES=0` in the
environment turns the escaping off, as it does for tritonserver.

`LogControl.install` replaces the root logger's handlers once, at start-up; `apply` changes
what passes and how lines look, at once, for every logger of the process.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

from thawwire.log_settings import LogFormat, LogSettings

__all__ = [
    "ESCAPE_ENV",
    "RELAYED",
    "LogControl",
    "TritonRecord",
    "escapes_messages",
    "log_to_stderr",
]

# tritonserver's switch for the messages' escaping: "0" turns it off, anything else leaves it on.
ESCAPE_ENV = "TRITON_SERVER_ESCAPE_LOG_MESSAGES"
# Set true on a record another process logged under the same settings (a `thaw up` replica's,
# relayed): its severity was judged there (a verbose line is an I record, as Triton's), so this
# process's filter lets it through as it came.
RELAYED = "thaw_relayed"
# Triton's severity letters: its verbose lines are I lines.
_LETTERS = {logging.DEBUG: "I", logging.INFO: "I", logging.WARNING: "W", logging.ERROR: "E"}


def escapes_messages(environ: dict[str, str] | None = None) -> bool:
    """Whether records quote and escape their message (tritonserver's rule: unless the
    environment sets TRITON_SERVER_ESCAPE_LOG_MESSAGES to "0")."""
    return (os.environ if environ is None else environ).get(ESCAPE_ENV) != "0"


class _Severities(logging.Filter):
    """Lets a record through when its severity is on (debug: when the verbose level is > 0)."""

    def __init__(self, settings: LogSettings) -> None:
        super().__init__()
        self.settings = settings

    def filter(self, record: logging.LogRecord) -> bool:
        if record.__dict__.get(RELAYED):
            return True
        s, level = self.settings, record.levelno
        if level >= logging.ERROR:
            return s.error
        if level >= logging.WARNING:
            return s.warning
        if level >= logging.INFO:
            return s.info
        return s.verbose_level > 0


class TritonRecord(logging.Formatter):
    """tritonserver 2.51's log record in one of its two formats:

        I1205 12:21:56.976943 5339 model.py:6] "init info"      (default)
        2026-12-05T12:21:56Z I 5339 model.py:6] "init info"     (ISO8601)

    A record's traceback (Thaw's own, from `logger.exception`) is part of its message, escaped
    with it; unescaped, it follows on lines of its own, as Triton's unescaped messages do."""

    def __init__(self, fmt: LogFormat, *, escaped: bool = True) -> None:
        super().__init__()
        self.iso = fmt is LogFormat.ISO8601
        self.escaped = escaped

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            message += "\n" + self.formatStack(record.stack_info)
        if self.escaped:
            message = json.dumps(message, ensure_ascii=False)
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
    handler.setFormatter(TritonRecord(LogFormat.DEFAULT, escaped=escapes_messages()))
    logging.basicConfig(level=level, handlers=[handler])


class LogControl:
    """The process's log settings and the one handler they govern."""

    def __init__(self, settings: LogSettings, *, quietest: int = logging.INFO) -> None:
        """`quietest`: the lowest severity logged while the verbose level is 0 (a server's
        `--log-level`: `thaw up`'s replicas log from WARNING)."""
        self._settings = settings
        self._quietest = quietest
        self._filter = _Severities(settings)
        self._handler: logging.Handler | None = None
        self._escaped = escapes_messages()

    @property
    def settings(self) -> LogSettings:
        return self._settings

    def install(self) -> None:
        """Send the root logger's lines to the settings' file (appended) or standard error,
        through this control's filter and format; the root's other handlers are removed."""
        root = logging.getLogger()
        for old in list(root.handlers):
            root.removeHandler(old)
        if self._settings.file:
            handler: logging.Handler = logging.FileHandler(Path(self._settings.file), "a")
        else:
            handler = logging.StreamHandler(sys.stderr)
        handler.addFilter(self._filter)
        root.addHandler(handler)
        self._handler = handler
        self.apply(self._settings)

    def apply(self, settings: LogSettings) -> None:
        """Log as `settings` say from now on (their `file` is the installed one: never
        changed here, whatever a client sent)."""
        self._settings = settings
        self._filter.settings = settings
        root = logging.getLogger()
        root.setLevel(logging.DEBUG if settings.verbose_level > 0 else self._quietest)
        if self._handler is not None:
            self._handler.setFormatter(TritonRecord(settings.format, escaped=self._escaped))
