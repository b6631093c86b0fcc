"""A repository load request's overrides, checked as `thaw up` checks them (thawwire.
load_overrides), each refusal translated into this package's 400.
"""

from __future__ import annotations

from typing import Any

from runtime.errors import InvalidInput
from thawwire import load_overrides as _wire
from thawwire.errors import LoadOverrideError

__all__ = ["check_config", "check_load_path", "load_overrides"]


def check_config(config: Any) -> str | None:
    """The `config` override as JSON text holding an object, or None when absent."""
    try:
        return _wire.check_config(config)
    except LoadOverrideError as exc:
        raise InvalidInput(exc.message) from None


def load_overrides(
    config: str | None, files: dict[str, bytes]
) -> tuple[str | None, dict[str, bytes] | None]:
    """The (config, files) a load goes with: files only together with a config."""
    try:
        return _wire.load_overrides(config, files)
    except LoadOverrideError as exc:
        raise InvalidInput(exc.message) from None


def check_load_path(path: str) -> None:
    """A `file:` path of a load request must be one the model directory can hold."""
    try:
        _wire.check_load_path(path)
    except LoadOverrideError as exc:
        raise InvalidInput(exc.message) from None
