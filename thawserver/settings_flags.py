"""The command-line flags of the logging and trace extensions, the same on `thaw serve` and
`thaw up` (tritonserver's names): `--log-file`, `--log-format`, `--trace-config` and the
deprecated `--trace-file|level|rate|count|log-frequency`, read into the operator's settings.
The files named here are the only ones either server writes its log or traces to.
"""

from __future__ import annotations

import argparse

from thawserver.bool_flag import triton_bool
from thawwire.log_settings import LogSettings, SettingsRefused, log_format
from thawwire.trace_flags import TraceFlags, trace_defaults
from thawwire.trace_settings import TraceSetting

__all__ = [
    "add_log_flags",
    "add_log_output_flags",
    "add_trace_flags",
    "log_settings",
    "trace_flag_warnings",
    "trace_setting",
]

# What tritonserver 2.51 prints on stderr for each deprecated trace flag given, before its log
# starts (src/command_line_parser.cc), by flag -> its `--trace-config` spelling.
_DEPRECATED_TRACE_FLAGS = {
    "file": "triton,file=<filepath>",
    "level": "level=<OFF|TIMESTAMPS|TENSORS>",
    "rate": "rate=<rate value>",
    "count": "count=<count value>",
    "log-frequency": "triton,log-frequency=<log frequency value>",
}


def add_log_flags(g: argparse._ArgumentGroup) -> None:
    """tritonserver's logging flags, the same on both servers: `--log-verbose`, the severity
    switches `--log-info|warning|error`, then `--log-file` and `--log-format`."""
    g.add_argument("--log-verbose", type=int, default=0, metavar="N",
                   help="verbose logging level; above 0 logs at debug")  # fmt: skip
    for level in ("info", "warning", "error"):
        g.add_argument(f"--log-{level}", type=triton_bool, default=True, metavar="BOOL",
                       help=f"log {level} messages (default true)")  # fmt: skip
    add_log_output_flags(g)


def add_log_output_flags(g: argparse._ArgumentGroup) -> None:
    """`--log-file` and `--log-format` (the severity flags are each server's own)."""
    g.add_argument("--log-file", default="", metavar="PATH",
                   help="append the log to PATH instead of standard error (no client can "
                   "change it: /v2/logging refuses log_file)")  # fmt: skip
    g.add_argument("--log-format", default="default", metavar="FORMAT",
                   help="log line format: default (thaw's) or ISO8601 (UTC first)")  # fmt: skip


def add_trace_flags(g: argparse._ArgumentGroup) -> None:
    """tritonserver's trace flags (thawwire.trace_flags reads them)."""
    g.add_argument("--trace-config", action="append", default=[], metavar="[triton,]KEY=VALUE",
                   help="the operator's trace setting: level=OFF|TIMESTAMPS|TENSORS, rate=N, "
                   "count=N, triton,file=PATH, triton,log-frequency=N (repeatable); clients "
                   "change all but the file through /v2/trace/setting")  # fmt: skip
    g.add_argument("--trace-file", default=None, metavar="PATH",
                   help="deprecated: --trace-config triton,file=PATH")  # fmt: skip
    g.add_argument("--trace-level", action="append", default=[], metavar="LEVEL",
                   help="deprecated: --trace-config level=LEVEL (repeatable)")  # fmt: skip
    for name in ("rate", "count", "log-frequency"):
        g.add_argument(f"--trace-{name}", type=int, default=None, metavar="N",
                       help=f"deprecated: --trace-config {name}=N")  # fmt: skip


def trace_flag_warnings(args: argparse.Namespace) -> list[str]:
    """tritonserver's warning for each deprecated trace flag given (`--trace-level` once per
    occurrence), in its words (qa/L0_cmdline_trace counts them)."""
    given = {
        "file": int(args.trace_file is not None),
        "level": len(args.trace_level),
        "rate": int(args.trace_rate is not None),
        "count": int(args.trace_count is not None),
        "log-frequency": int(args.trace_log_frequency is not None),
    }
    return [
        f"Warning: '--trace-{flag}' has been deprecated and will be removed in future releases. "
        f"Please use '--trace-config {spelling} instead."
        for flag, spelling in _DEPRECATED_TRACE_FLAGS.items()
        for _ in range(given[flag])
    ]


def trace_setting(args: argparse.Namespace) -> TraceSetting:
    """The operator's trace setting from the flags; ValueError names a bad one."""
    return trace_defaults(
        TraceFlags(
            config=tuple(args.trace_config),
            file=args.trace_file,
            levels=tuple(args.trace_level),
            rate=args.trace_rate,
            count=args.trace_count,
            log_frequency=args.trace_log_frequency,
        )
    )


def log_settings(
    args: argparse.Namespace, *, info: bool, warning: bool, error: bool, verbose_level: int
) -> LogSettings:
    """The operator's log settings: the output flags here and each server's severities;
    ValueError names a bad format."""
    try:
        fmt = log_format(args.log_format)
    except SettingsRefused as exc:
        raise ValueError(f"`log_format` = {args.log_format!r}: {exc.message}") from None
    if verbose_level < 0:
        raise ValueError(f"`log_verbose` = {verbose_level}, must be >= 0")
    return LogSettings(
        file=args.log_file,
        info=info,
        warning=warning,
        error=error,
        verbose_level=verbose_level,
        format=fmt,
    )
