"""This process's Python logging, governed by Triton's log settings (thawwire.log_settings):
where lines go (standard error, or the operator's `--log-file`), which severities pass, the
verbose level (above 0: debug lines too) and the record format (tritonserver's default or
ISO8601 record: thawserver.log_records), changeable while serving.

`LogControl.install` replaces the root logger's handlers once, at start-up; `apply` changes
what passes and how lines look, at once, for every logger of the process.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from thawserver.log_records import TritonRecord, escapes_messages
from thawwire.log_settings import LogFormat, LogSettings

__all__ = ["RELAYED", "LogControl"]

# Set true on a record another process logged under the same settings (a `thaw up` replica's,
# relayed): its severity was judged there (a verbose line is an I record, as Triton's), so this
# process's filter lets it through as it came.
RELAYED = "thaw_relayed"


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
            iso8601 = settings.format is LogFormat.ISO8601
            self._handler.setFormatter(TritonRecord(iso8601=iso8601, escaped=self._escaped))
