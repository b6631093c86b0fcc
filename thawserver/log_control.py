"""This process's Python logging, governed by Triton's log settings (thawwire.log_settings):
where lines go (standard error, or the operator's `--log-file`), which severities pass, the
verbose level (above 0: debug lines too) and the line format, changeable while serving.

`LogControl.install` replaces the root logger's handlers once, at start-up; `apply` changes
what passes and how lines look, at once, for every logger of the process.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from thawwire.log_settings import LogFormat, LogSettings

__all__ = ["DEFAULT_FORMAT", "LogControl"]

DEFAULT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_ISO_DATE = "%Y-%m-%dT%H:%M:%SZ"
# Triton's severity letters: its verbose lines are I lines.
_LETTERS = {logging.DEBUG: "I", logging.INFO: "I", logging.WARNING: "W", logging.ERROR: "E"}


class _Severities(logging.Filter):
    """Lets a record through when its severity is on (debug: when the verbose level is > 0)."""

    def __init__(self, settings: LogSettings) -> None:
        super().__init__()
        self.settings = settings

    def filter(self, record: logging.LogRecord) -> bool:
        s, level = self.settings, record.levelno
        if level >= logging.ERROR:
            return s.error
        if level >= logging.WARNING:
            return s.warning
        if level >= logging.INFO:
            return s.info
        return s.verbose_level > 0


class _TritonRecord(logging.Formatter):
    """Triton 2.51's ISO8601 record: UTC time to the second, a one-letter severity, the process
    id, the source file and line (a Python model's own, for its `pb_utils.Logger` lines), then
    the message in quotes with its quotes, backslashes and control characters escaped, so that
    a record is one line:

        2026-12-05T12:21:56Z I 5339 model.py:6] "init info"
    """

    def format(self, record: logging.LogRecord) -> str:
        when = time.strftime(_ISO_DATE, time.gmtime(record.created))
        letter = _LETTERS.get(record.levelno) or ("E" if record.levelno > logging.ERROR else "I")
        message = json.dumps(record.getMessage(), ensure_ascii=False)
        line = f"{when} {letter} {record.process} {record.filename}:{record.lineno}] {message}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)  # Thaw's own tracebacks
        return line


def _formatter(fmt: LogFormat) -> logging.Formatter:
    if fmt is LogFormat.ISO8601:
        return _TritonRecord()
    return logging.Formatter(DEFAULT_FORMAT)


class LogControl:
    """The process's log settings and the one handler they govern."""

    def __init__(self, settings: LogSettings, *, quietest: int = logging.INFO) -> None:
        """`quietest`: the lowest severity logged while the verbose level is 0 (a server's
        `--log-level`: `thaw up`'s replicas log from WARNING)."""
        self._settings = settings
        self._quietest = quietest
        self._filter = _Severities(settings)
        self._handler: logging.Handler | None = None

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
            self._handler.setFormatter(_formatter(settings.format))
