"""tritonserver's trace flags read into the operator's trace setting, as 2.51's command line
parser reads them: `--trace-config [triton,]SETTING=VALUE` (repeatable) and the deprecated
`--trace-file`, `--trace-level` (repeatable), `--trace-rate`, `--trace-count`,
`--trace-log-frequency`, which `--trace-config` overrides. Only the `triton` mode exists here:
`opentelemetry` is refused by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from thawwire.trace_settings import TraceSetting

__all__ = ["TraceFlags", "as_flags", "trace_defaults"]


@dataclass(frozen=True, slots=True)
class TraceFlags:
    """The trace flags as given (None: not given)."""

    config: Sequence[str] = ()
    file: str | None = None
    levels: Sequence[str] = field(default_factory=tuple)
    rate: int | None = None
    count: int | None = None
    log_frequency: int | None = None


def _level(text: str) -> frozenset[str]:
    """One level option (Triton's spellings, any case); empty = OFF."""
    word = text.strip().lower()
    if word in ("false", "off"):
        return frozenset()
    if word in ("true", "on", "min", "max", "timestamps"):
        return frozenset({"TIMESTAMPS"})
    if word == "tensors":
        return frozenset({"TENSORS"})
    raise ValueError(f"invalid value for trace level option: {text}")


def _int(option: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f'Bad option: "--trace-config {option}": not an integer: {text}') from None


def _split(arg: str) -> tuple[str, str, str]:
    """`[mode,]setting=value` -> (mode or "", setting, value), in Triton's words on error."""
    mode, comma, rest = arg.partition(",")
    if not comma:
        mode, rest = "", arg
    elif not mode:
        raise ValueError(
            "No trace mode specified. --trace-config option format is "
            f"<trace mode>,<setting>=<value> or <setting>=<value>. Got {arg}"
        )
    setting, eq, value = rest.partition("=")
    if not eq or not setting or not value:
        raise ValueError(
            f"--trace-config option format is '<trace mode>,<setting>=<value>'. Got {arg}"
        )
    if mode and mode.lower() != "triton":
        _mode(mode)
    return mode.lower(), setting, value


def _mode(text: str) -> str:
    word = text.lower()
    if word == "triton":
        return word
    if word == "opentelemetry":
        raise ValueError("trace mode 'opentelemetry' is not supported by thaw (only 'triton')")
    raise ValueError(
        f'invalid value for trace mode option: {text}. Available options are "triton" and '
        '"opentelemetry"'
    )


def trace_defaults(flags: TraceFlags) -> TraceSetting:
    """The operator's setting (what the trace APIs fall back to); ValueError names a bad flag."""
    level: frozenset[str] = frozenset()
    disabled = False
    for text in flags.levels:
        parsed = _level(text)
        disabled |= not parsed
        level |= parsed
    rate = 1000 if flags.rate is None else flags.rate
    count = -1 if flags.count is None else flags.count
    log_frequency = 0 if flags.log_frequency is None else flags.log_frequency
    file = flags.file or ""
    for arg in flags.config:
        mode, setting, value = _split(arg)
        option = f"{mode + ',' if mode else ''}{setting}"
        if not mode and setting == "level":
            parsed = _level(value)
            disabled |= not parsed
            level |= parsed
        elif not mode and setting == "rate":
            rate = _int(option, value)
        elif not mode and setting == "count":
            count = _int(option, value)
        elif not mode and setting == "mode":
            _mode(value)
        elif mode and setting == "file":
            file = value
        elif mode and setting == "log-frequency":
            log_frequency = _int(option, value)
        else:
            raise ValueError(f'Bad option: "--trace-config {option}": unknown setting')
    if rate < 0 or count < -1 or log_frequency < 0:
        raise ValueError(
            "trace rate and log frequency must be >= 0 and trace count >= -1, got "
            f"rate={rate} count={count} log-frequency={log_frequency}"
        )
    return TraceSetting(
        level=frozenset() if disabled else level,
        rate=rate,
        count=count,
        log_frequency=log_frequency,
        file=file,
    )


def as_flags(setting: TraceSetting, file: str) -> tuple[str, ...]:
    """`--trace-config` flags that give a server `setting`, writing to `file` (how `thaw up`
    starts its replicas: the operator's setting, each replica a file of its own)."""
    levels: list[str] = [n for n in ("TIMESTAMPS", "TENSORS") if n in setting.level] or ["OFF"]
    flags = [f"--trace-config=level={name}" for name in levels]
    flags += [
        f"--trace-config=rate={setting.rate}",
        f"--trace-config=count={setting.count}",
        f"--trace-config=triton,file={file}",
        f"--trace-config=triton,log-frequency={setting.log_frequency}",
    ]
    return tuple(flags)
