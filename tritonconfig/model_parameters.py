"""A model config's string `parameters` read as Triton's backends read them: booleans by its
`ParseBoolValue` (true/yes/1/on, false/no/0/off, any case), integers as whole numbers; a value
that is neither refuses the load in its words. None: the config does not set the key."""

from __future__ import annotations

from tritonconfig.errors import ModelConfigError
from tritonconfig.schema import mc

__all__ = ["optional_bool", "optional_int", "optional_string"]

_TRUE = frozenset({"true", "yes", "1", "on"})
_FALSE = frozenset({"false", "no", "0", "off"})


def optional_string(config: mc.ModelConfig, key: str) -> str | None:
    return config.parameters[key].string_value if key in config.parameters else None


def optional_bool(config: mc.ModelConfig, key: str) -> bool | None:
    value = optional_string(config, key)
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ModelConfigError(f"failed to convert '{value}' to boolean value")


def optional_int(config: mc.ModelConfig, key: str) -> int | None:
    value = optional_string(config, key)
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        raise ModelConfigError(
            f"failed to convert '{value}' to integral number for parameter '{key}'"
        ) from None
