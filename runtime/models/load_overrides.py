"""A repository load request's overrides, read and checked as `thaw up` reads them (thawwire.
load_overrides, one copy of the rules for both servers), each refusal translated into this
package's 400; a load goes with (config JSON text, files by path), either None when absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.errors import InvalidInput
from thawwire import load_overrides as _wire
from thawwire.errors import LoadOverrideError

__all__ = ["load_overrides", "overrides_from_grpc", "overrides_from_json"]

Overrides = tuple[str | None, dict[str, bytes] | None]


def overrides_from_json(params: Mapping[str, Any]) -> Overrides:
    """A REST load's `parameters`: `config` (a JSON string or object) and base64 `file:`s."""
    try:
        return _pair(_wire.overrides_from_json(params))
    except LoadOverrideError as exc:
        raise InvalidInput(exc.message) from None


def overrides_from_grpc(parameters: Mapping[str, Any]) -> Overrides:
    """A RepositoryModelLoad's `parameters`: `config` (string_param), `file:`s (bytes_param)."""
    try:
        return _pair(_wire.overrides_from_grpc(parameters))
    except LoadOverrideError as exc:
        raise InvalidInput(exc.message) from None


def load_overrides(config: str | None, files: dict[str, bytes]) -> Overrides:
    """The (config, files) a load goes with: files only together with a config."""
    try:
        return _wire.load_overrides(config, files)
    except LoadOverrideError as exc:
        raise InvalidInput(exc.message) from None


def _pair(override: _wire.LoadOverride | None) -> Overrides:
    if override is None:
        return None, None
    return override.config_json, dict(override.files) or None
