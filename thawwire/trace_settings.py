"""Triton's trace extension as values: the server's trace settings, global and per model, and a
client's update of them checked and merged as Triton 2.51's TraceManager does.

    TraceSetting    one effective setting (level, rate, count, log frequency, file, mode)
    TraceUpdate     a client's change: a value per setting given, or None to clear it
    TraceSettings   the operator's defaults (`--trace-config`), the global overrides and each
                    model's: a model's setting is its own overrides over the global one, the
                    global one the global overrides over the defaults; clearing an override
                    falls back to the level below, and a model left with none follows the
                    global setting again

The trace file is the operator's (`--trace-config triton,file=...`): a client naming
`trace_file` is refused with Triton's sentence (CVE-2024-0100). Unlike Triton, a level Triton
does not know, a number with trailing text ("12abc") or out of its range, and a key Triton
does not know are refused rather than read loosely or ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from thawwire.log_settings import SettingsRefused

__all__ = [
    "LEVELS",
    "TRACE_FILE_REFUSAL",
    "TraceSetting",
    "TraceSettings",
    "TraceUpdate",
    "parse_trace_update",
]

TRACE_FILE_REFUSAL = "trace file location can not be updated through network protocol"
# The levels a setting may combine, in the order Triton lists them; none of them is "OFF".
LEVELS = ("TIMESTAMPS", "TENSORS")
_UINT32_MAX = (1 << 32) - 1
_INT32_MAX = (1 << 31) - 1
# Each numeric setting: (field, smallest, largest).
_NUMBERS = {
    "trace_rate": ("rate", 0, _UINT32_MAX),
    "trace_count": ("count", -1, _INT32_MAX),
    "log_frequency": ("log_frequency", 0, _UINT32_MAX),
}
_FIELDS = ("level", "rate", "count", "log_frequency")


@dataclass(frozen=True, slots=True)
class TraceSetting:
    """One effective setting. `level`: a subset of LEVELS (empty = OFF); `count` -1: no limit;
    `log_frequency` 0: write at shutdown only; `file`: the operator's ("" = none)."""

    level: frozenset[str] = frozenset()
    rate: int = 1000
    count: int = -1
    log_frequency: int = 0
    file: str = ""
    mode: str = "triton"

    def as_json(self) -> dict[str, Any]:
        """The document `GET /v2/trace/setting` answers (Triton's keys, numbers as strings)."""
        return {
            "trace_level": [name for name in LEVELS if name in self.level] or ["OFF"],
            "trace_rate": str(self.rate),
            "trace_count": str(self.count),
            "log_frequency": str(self.log_frequency),
            "trace_file": self.file,
            "trace_mode": self.mode,
        }

    def invalid_reason(self) -> str | None:
        """Why this setting cannot trace (Triton's words), None when it can."""
        if not self.level:
            return "tracing is disabled"
        if self.rate == 0:
            return "sample rate must be non-zero"
        if not self.file:
            return "trace file name is not given"
        return None


@dataclass(frozen=True, slots=True)
class TraceUpdate:
    """A client's change: `values` by field (`level`, `rate`, `count`, `log_frequency`), each a
    new value, or None to clear the override (fall back to the level below)."""

    values: Mapping[str, Any]


def parse_trace_update(doc: Mapping[str, Any]) -> TraceUpdate:
    """A client's update, as JSON (`trace_level`: a list of names; the numbers as strings, as
    tritonclient sends them, or integers; None clears) or as gRPC's lists of strings (an empty
    list clears). SettingsRefused names the first thing Triton would refuse."""
    if "trace_file" in doc:
        raise SettingsRefused(TRACE_FILE_REFUSAL, unsupported=True)
    unknown = sorted(key for key in doc if key != "trace_level" and key not in _NUMBERS)
    if unknown:
        raise SettingsRefused(f"unknown trace setting '{unknown[0][:100]}'")
    values: dict[str, Any] = {}
    if "trace_level" in doc:
        values["level"] = _level(doc["trace_level"])
    for key, (field, low, high) in _NUMBERS.items():
        if key in doc:
            values[field] = _number(key, doc[key], low, high)
    return TraceUpdate(values)


def _level(value: Any) -> frozenset[str] | None:
    if value is None or value == []:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SettingsRefused("'trace_level' must be a list of level names")
    if "OFF" in value:
        if len(value) != 1:
            raise SettingsRefused("Expect only one trace level 'OFF' is specified")
        return frozenset()
    bad = [v for v in value if v not in LEVELS]
    if bad:
        raise SettingsRefused(
            f"unknown trace level '{bad[0][:100]}', expecting OFF, TIMESTAMPS or TENSORS"
        )
    return frozenset(value)


def _number(key: str, value: Any, low: int, high: int) -> int | None:
    if isinstance(value, list):  # gRPC: a list of strings
        if not value:
            return None
        if len(value) != 1:
            raise SettingsRefused(f"expect only 1 value for '{key}'")
        value = value[0]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise SettingsRefused(f"Unable to parse '{key}', got: {str(value)[:100]}")
    text = str(value).strip()
    digits = text[1:] if text[:1] in "+-" else text
    if not digits.isascii() or not digits.isdigit() or len(digits) > 20:
        raise SettingsRefused(f"Unable to parse '{key}', got: {text[:100]}")
    number = int(text)
    if not low <= number <= high:
        raise SettingsRefused(
            f"Unable to parse '{key}', value is out of range [ {low}, {high} ], got: {text}"
        )
    return number


class TraceSettings:
    """The server's trace settings: the operator's defaults, the global overrides, each
    model's overrides (a model named here must exist; the caller checks)."""

    def __init__(self, defaults: TraceSetting) -> None:
        self.defaults = defaults
        self._global: dict[str, Any] = {}
        self._models: dict[str, dict[str, Any]] = {}
        # Counts the changes: a reader that caches a model's setting compares it.
        self.generation = 0
        # Whether any setting traces at all (a level on, a file): a tracer's hot-path check.
        self.maybe_tracing = self._maybe_tracing()
        # Called with `maybe_tracing` after each update (the native front forwards every
        # infer while it is true: runtime.process.hot_models).
        self.watchers: list[Callable[[bool], None]] = []

    def setting(self, model: str | None = None) -> TraceSetting:
        """The effective setting of `model` (None: the global one)."""
        effective = replace(self.defaults, **self._global)
        if model is not None:
            effective = replace(effective, **self._models.get(model, {}))
        return effective

    def update(self, model: str | None, change: TraceUpdate) -> TraceSetting:
        """Apply `change` to `model`'s overrides (None: the global ones) and return the new
        effective setting; SettingsRefused (nothing applied) when the result could not trace
        for a reason other than being off, in Triton's words."""
        current = self._global if model is None else self._models.get(model, {})
        overrides = dict(current)
        for field, value in change.values.items():
            if value is None:
                overrides.pop(field, None)
            else:
                overrides[field] = value
        base = replace(self.defaults, **self._global) if model is not None else self.defaults
        candidate = replace(base, **overrides)
        reason = candidate.invalid_reason()
        if reason is not None and candidate.level:
            raise SettingsRefused(f"Attempting to set invalid trace setting :{reason}")
        if model is None:
            self._global = overrides
        elif overrides:
            self._models[model] = overrides
        else:
            self._models.pop(model, None)  # the model follows the global setting again
        self.generation += 1
        self.maybe_tracing = self._maybe_tracing()
        for watcher in self.watchers:
            watcher(self.maybe_tracing)
        return candidate

    def _maybe_tracing(self) -> bool:
        if not self.defaults.file:
            return False
        return bool(self.setting().level) or any(self.setting(m).level for m in self._models)

    def has_own(self, model: str) -> bool:
        """Whether `model` has settings of its own (else it follows the global ones)."""
        return model in self._models

    def overridden(self) -> tuple[str, ...]:
        """The models with settings of their own."""
        return tuple(sorted(self._models))
