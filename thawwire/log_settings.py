"""Triton's logging extension as a value: the settings `GET/POST /v2/logging` and gRPC
`LogSettings` show, and a client's update of them checked in Triton 2.51's words.

A client may turn severities on and off, set the verbose level and the line format; it may
never choose where the log goes (`log_file`: CVE-2024-0087): that is the operator's
`--log-file`, refused over the network with Triton's own sentence. Unlike Triton, an update is
checked whole before any of it applies (Triton applies the keys before a bad one), and a key
Triton does not know is refused instead of ignored (a typo would otherwise change nothing,
silently).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

__all__ = [
    "LOG_FILE_REFUSAL",
    "LogFormat",
    "LogSettings",
    "SettingsRefused",
    "log_format",
    "update_log_settings",
]

LOG_FILE_REFUSAL = "log file location can not be updated through network protocol"

# The largest `log_verbose_level` (Triton's is a uint32 on gRPC, kept to an int32 inside).
_MAX_VERBOSE = (1 << 31) - 1


class SettingsRefused(Exception):
    """An update Triton would refuse; `unsupported`: Triton's UNSUPPORTED (HTTP 501, gRPC
    UNIMPLEMENTED: a file location), else INVALID_ARG (400, INVALID_ARGUMENT)."""

    def __init__(self, message: str, *, unsupported: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.unsupported = unsupported


class LogFormat(StrEnum):
    """`log_format`: tritonserver's record, its time as `MMDD hh:mm:ss.ssssss` (default) or as
    an ISO 8601 UTC time to the second (thawserver.log_control)."""

    DEFAULT = "default"
    ISO8601 = "ISO8601"


@dataclass(frozen=True, slots=True)
class LogSettings:
    """What the server logs. `file`: the operator's `--log-file` ("" = standard error)."""

    file: str = ""
    info: bool = True
    warning: bool = True
    error: bool = True
    verbose_level: int = 0
    format: LogFormat = LogFormat.DEFAULT

    def as_json(self) -> dict[str, Any]:
        """The document `GET /v2/logging` answers (Triton's keys)."""
        return {
            "log_file": self.file,
            "log_info": self.info,
            "log_warning": self.warning,
            "log_error": self.error,
            "log_verbose_level": self.verbose_level,
            "log_format": self.format.value,
        }


_BOOLS = {"log_info": "info", "log_warning": "warning", "log_error": "error"}
_KNOWN = frozenset({"log_file", "log_verbose_level", "log_format", *_BOOLS})


def log_format(text: str) -> LogFormat:
    """`--log-format` / `log_format`; SettingsRefused in Triton's words for anything else."""
    try:
        return LogFormat(text)
    except ValueError:
        raise SettingsRefused(f"invalid argument for log_format, got: {text}") from None


def update_log_settings(current: LogSettings, update: Mapping[str, Any]) -> LogSettings:
    """`current` with a client's `update` (JSON values; None leaves a setting as it is, as
    Triton does), or SettingsRefused naming the first bad key; nothing applies on a refusal."""
    unknown = sorted(key for key in update if key not in _KNOWN)
    if unknown:
        raise SettingsRefused(f"unknown log setting '{unknown[0][:100]}'")
    if update.get("log_file") is not None:
        raise SettingsRefused(LOG_FILE_REFUSAL, unsupported=True)
    changes: dict[str, Any] = {}
    for key, field in _BOOLS.items():
        value = update.get(key)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise SettingsRefused(f"expect boolean for '{key}'")
        changes[field] = value
    verbose = update.get("log_verbose_level")
    if verbose is not None:
        if isinstance(verbose, bool) or not isinstance(verbose, int):
            raise SettingsRefused("expect int32 for 'log_verbose_level'")
        if not 0 <= verbose <= _MAX_VERBOSE:
            raise SettingsRefused(
                f"'log_verbose_level' = {verbose}, must be in [0, {_MAX_VERBOSE}]"
            )
        changes["verbose_level"] = verbose
    fmt = update.get("log_format")
    if fmt is not None:
        if not isinstance(fmt, str):
            raise SettingsRefused("expect string for 'log_format'")
        changes["format"] = log_format(fmt)
    return replace(current, **changes)
