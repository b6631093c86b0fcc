"""A repository load request's overrides, read and checked as `thaw up` reads them (thawwire.
load_overrides, one copy of the rules for both servers), each refusal translated into this
package's 400; a load goes with (config JSON text, files by path), either None when absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.errors import InvalidInput
from runtime.models.load_errors import refused_overrides
from thawwire import load_overrides as _wire
from thawwire.errors import LoadOverrideError, LoadParameterError

__all__ = [
    "check_load_parameters",
    "load_overrides",
    "overrides_from_grpc",
    "overrides_from_json",
    "unload_dependents_from_grpc",
    "unload_dependents_from_json",
]

Overrides = tuple[str | None, dict[str, bytes] | None]


def overrides_from_json(params: Mapping[str, Any]) -> Overrides:
    """A REST load's `parameters`: `config` (a JSON string or object) and base64 `file:`s."""
    try:
        return _pair(_wire.overrides_from_json(params))
    except LoadOverrideError as exc:
        raise InvalidInput(exc.message) from None


def overrides_from_grpc(name: str, parameters: Mapping[str, Any]) -> Overrides:
    """A RepositoryModelLoad's `parameters`: `config` (string_param), `file:`s (bytes_param);
    a refused override is worded as a refused load of `name`, a parameter of the wrong kind
    or name in Triton's words alone."""
    try:
        return _pair(_wire.overrides_from_grpc(parameters))
    except LoadParameterError as exc:
        raise InvalidInput(exc.message) from None
    except LoadOverrideError as exc:
        raise refused_overrides(name, InvalidInput(exc.message)) from None


def check_load_parameters(parameters: Mapping[str, Any]) -> None:
    """A RepositoryModelLoad's `parameters` by kind and name (Triton's words if wrong)."""
    try:
        _wire.check_load_parameters(parameters)
    except LoadParameterError as exc:
        raise InvalidInput(exc.message) from None


def unload_dependents_from_json(params: Mapping[str, Any]) -> bool:
    """A REST unload's `parameters.unload_dependents` (a JSON boolean, refused if not)."""
    try:
        return _wire.unload_dependents_from_json(params)
    except LoadParameterError as exc:
        raise InvalidInput(exc.message) from None


def unload_dependents_from_grpc(parameters: Mapping[str, Any]) -> bool:
    """A RepositoryModelUnload's `unload_dependents` (a `bool_param`, Triton's words if not)."""
    try:
        return _wire.unload_dependents_from_grpc(parameters)
    except LoadParameterError as exc:
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
