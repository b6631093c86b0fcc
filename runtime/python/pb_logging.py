"""pb_utils' model logger: `Logger` and `LogLevel`, as Triton's `triton_python_backend_utils`
has them (pb_utils re-exports both). Each line goes to the server's log through the current
ModelHost (from a stub process too), naming the model's own file and line, as Triton's record
does. Like pb_utils, imported by stub processes: the stdlib and `runtime.python.host` only.
"""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Callable
from typing import Any

from runtime.python.host import ModelHost
from runtime.python.pb_tensors import TritonModelException

__all__ = ["LogLevel", "Logger", "bind_host"]


def _no_host() -> ModelHost:
    raise TritonModelException("pb_logging: no host is bound (import pb_utils first)")


# pb_utils binds its `current_host` at import (as for pb_metrics): the host is pb_utils' global.
_current_host: Callable[[], ModelHost] = _no_host


def bind_host(current_host: Callable[[], ModelHost]) -> None:
    """Make Logger write through whatever host `current_host()` answers at each call."""
    global _current_host
    _current_host = current_host


class LogLevel(enum.IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


def _caller():
    """The file name and line of the model code that called the Logger (Triton's record
    names them), past the Logger's own frames."""
    frame: Any = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    if frame is None:
        return None
    return os.path.basename(frame.f_code.co_filename), frame.f_lineno


class Logger:
    """Triton's model logger: lines go to the server's log (from a stub process too), each
    naming the model's file and line."""

    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message, level=LogLevel.INFO):
        # Triton's binding takes a str message (bytes too) and a LogLevel, never a plain int.
        if isinstance(message, bytes):
            message = message.decode()
        if not isinstance(message, str):
            raise TypeError(f"Logger.log(): message must be str, not {type(message).__name__}")
        if not isinstance(level, LogLevel):
            raise TypeError(f"Logger.log(): level must be a LogLevel, not {type(level).__name__}")
        _current_host().log(int(level), message, _caller())

    @staticmethod
    def log_info(message):
        Logger.log(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message):
        Logger.log(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message):
        Logger.log(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message):
        Logger.log(message, LogLevel.VERBOSE)
