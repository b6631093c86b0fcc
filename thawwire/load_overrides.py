"""A repository load request's overrides, checked: a config (JSON text) and model files by path.

Both protocols carry them (REST: `parameters.config` and base64 `file:<path>` strings; gRPC:
`string_param` and `bytes_param` of the same keys) and both servers check them here (`thaw
serve` loads them, `thaw up` writes them out and gives them to its replicas), so a bad override
gets one answer whichever way and to whichever server it came. Each refusal is a
`LoadOverrideError`, which both servers answer 400 as `failed to load '<name>', <why>`; a gRPC
load or unload parameter of the wrong kind or name is a `LoadParameterError`, answered in
Triton's words alone (INVALID_ARGUMENT).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from thawwire.errors import LoadOverrideError, LoadParameterError
from thawwire.grpc_messages import parameter_kind

__all__ = [
    "LoadOverride",
    "check_config",
    "check_load_parameters",
    "check_load_path",
    "load_overrides",
    "overrides_from_grpc",
    "overrides_from_json",
    "refused",
    "rest_parameters",
    "unload_dependents_from_grpc",
    "unload_dependents_from_json",
]

_LOAD_FAILED = "failed to poll from model repository"
# Linux's NAME_MAX and PATH_MAX, in bytes: a `file:` path past them cannot be written.
_NAME_MAX_BYTES = 255
_PATH_MAX_BYTES = 4095
FILE_PREFIX = "file:"


@dataclass(frozen=True)
class LoadOverride:
    """A checked override: the config as JSON text holding an object, and the model's files
    (`<version>/<path>` -> contents; empty: the repository's own files with this config)."""

    config_json: str
    files: Mapping[str, bytes] = field(default_factory=dict)

    def parameters(self) -> dict[str, str]:
        """The override as a REST load call's `parameters` (files base64-encoded)."""
        return rest_parameters(self.config_json, self.files)


def rest_parameters(config_json: str | None, files: Mapping[str, bytes] | None) -> dict[str, str]:
    """A REST load call's `parameters` for a `config` (JSON text; none when None or empty) and
    `files` (`<version>/<path>` -> contents, base64-encoded under `file:` keys), unchecked: the
    server that takes the call checks them (a Python model's `pb_utils.load_model` through
    `thaw up`'s front door sends what the model gave)."""
    params = {"config": config_json} if config_json else {}
    for path, content in (files or {}).items():
        params[FILE_PREFIX + path] = base64.b64encode(content).decode("ascii")
    return params


def refused(name: str, why: str) -> str:
    """A load's refused override, in Triton's words (qa/L0_lifecycle test_file_override), then
    what was wrong: `failed to load '<name>', failed to poll from model repository: <why>`."""
    if not why.startswith(_LOAD_FAILED):
        why = f"{_LOAD_FAILED}: {why}"
    return f"failed to load '{name}', {why}"


def check_config(config: Any) -> str | None:
    """The `config` override as JSON text holding an object, or None when absent."""
    if config is None:
        return None
    if not isinstance(config, str):
        raise LoadOverrideError("parameter 'config' must be a JSON string")
    try:
        doc = json.loads(config)
    except (ValueError, RecursionError):
        doc = _with_bare_keys(config)
        config = json.dumps(doc)
    if not isinstance(doc, dict):
        raise LoadOverrideError("parameter 'config' must hold a JSON object")
    return config


# A JSON string, and a field name written without quotes where an object's key goes.
_STRING = re.compile(r'("(?:[^"\\]|\\.)*")')
_BARE_KEY = re.compile(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)(\s*:)")


def _with_bare_keys(config: str) -> Any:
    """`config` parsed as Triton's parser (protobuf's JSON parser) reads it, which also takes
    field names without quotes (`{ direct: { ... } }`, as qa/L0_iterative_sequence sends);
    LoadOverrideError when it is not JSON even so."""
    parts = _STRING.split(config)  # odd parts are strings, left as they are
    quoted = "".join(p if i % 2 else _BARE_KEY.sub(r'\1"\2"\3', p) for i, p in enumerate(parts))
    try:
        return json.loads(quoted)
    except (ValueError, RecursionError):
        raise LoadOverrideError("parameter 'config' is not valid JSON") from None


def load_overrides(
    config: str | None, files: dict[str, bytes]
) -> tuple[str | None, dict[str, bytes] | None]:
    """The (config, files) a load goes with: files only together with a config."""
    if files and config is None:
        raise LoadOverrideError(
            f"{_LOAD_FAILED}: a load request with 'file:' parameters must also carry 'config'"
        )
    return config, files or None


def check_load_path(path: str) -> None:
    """A `file:` path of a load request must be one the model directory can hold.

    Triton answers 500 with its poll-failure text; Thaw keeps the text, with a 400 that says
    what is wrong with the path.
    """
    shown = repr(path[:80]) + ("..." if len(path) > 80 else "")
    parts = path.split("/")
    bad_char = any(ord(c) < 32 or c == "\\" for c in path)
    if not path or bad_char or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise LoadOverrideError(f"load file path {shown} must be relative, without '..'")
    try:
        encoded = [part.encode("utf-8") for part in parts]
    except UnicodeEncodeError:
        raise LoadOverrideError(
            f"{_LOAD_FAILED}: load file path {shown} is not valid UTF-8"
        ) from None
    longest = max(len(part) for part in encoded)
    if longest > _NAME_MAX_BYTES:
        raise LoadOverrideError(
            f"{_LOAD_FAILED}: load file path {shown} has a component of {longest} bytes; "
            f"a file name can have at most {_NAME_MAX_BYTES}"
        )
    if sum(len(part) + 1 for part in encoded) > _PATH_MAX_BYTES:
        raise LoadOverrideError(
            f"{_LOAD_FAILED}: load file path {shown} is longer than {_PATH_MAX_BYTES} bytes"
        )


def overrides_from_json(params: Mapping[str, Any]) -> LoadOverride | None:
    """A REST load's `parameters` object: its override, or None when it has none."""
    config = params.get("config")
    if isinstance(config, dict):
        config = json.dumps(config)
    config = check_config(config)
    files: dict[str, bytes] = {}
    for key, value in params.items():
        if not key.startswith(FILE_PREFIX):
            continue
        path = key.removeprefix(FILE_PREFIX)
        check_load_path(path)
        if not isinstance(value, str):
            raise LoadOverrideError(f"load file {path[:80]!r} must be base64 text")
        try:
            files[path] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise LoadOverrideError(f"load file {path[:80]!r} is not valid base64") from None
    return _override(config, files)


def check_load_parameters(parameters: Mapping[str, Any]) -> None:
    """A RepositoryModelLoad's `parameters` checked by kind and name alone, as Triton's gRPC
    frontend checks them before anything else (before the model control mode too): a
    `config` that is no `string_param`, a `file:` that is no `bytes_param` or any other key is
    a LoadParameterError."""
    for key, param in parameters.items():
        kind = parameter_kind(param)
        if key == "config":
            if kind != "string_param":
                raise LoadParameterError(
                    "invalid value type for load parameter 'config', expected string_param."
                )
        elif key.startswith(FILE_PREFIX):
            if kind != "bytes_param":
                raise LoadParameterError(
                    f"invalid value type for load parameter '{key[:80]}', expected bytes_param."
                )
        else:
            raise LoadParameterError(f"unrecognized load parameter '{key[:80]}'.")


def overrides_from_grpc(parameters: Mapping[str, Any]) -> LoadOverride | None:
    """A RepositoryModelLoad's `parameters` (`ModelRepositoryParameter`s by key): its
    override, or None when it has none. Every key is checked (`check_load_parameters`) before
    any value is read."""
    check_load_parameters(parameters)
    config = None
    files: dict[str, bytes] = {}
    for key, param in parameters.items():
        if key == "config":
            config = check_config(param.string_param)
        else:
            path = key.removeprefix(FILE_PREFIX)
            check_load_path(path)
            files[path] = bytes(param.bytes_param)
    return _override(config, files)


def unload_dependents_from_json(params: Mapping[str, Any]) -> bool:
    """A REST unload's `parameters.unload_dependents` (False when absent); anything but a
    JSON boolean is a LoadParameterError (Triton ignores it: a flag that says nothing is
    refused, not guessed at)."""
    value = params.get("unload_dependents", False)
    if not isinstance(value, bool):
        raise LoadParameterError("parameter 'unload_dependents' must be true or false")
    return value


def unload_dependents_from_grpc(parameters: Mapping[str, Any]) -> bool:
    """A RepositoryModelUnload's `unload_dependents` (False when absent); of another kind than
    `bool_param` it is a LoadParameterError in Triton's words. Other keys are not read, as
    Triton's frontend does not read them."""
    param = parameters.get("unload_dependents")
    if param is None:
        return False
    if parameter_kind(param) != "bool_param":
        raise LoadParameterError(
            "invalid value type for 'unload_dependents' parameter, expected bool_param."
        )
    return bool(param.bool_param)


def _override(config: str | None, files: dict[str, bytes]) -> LoadOverride | None:
    config, checked = load_overrides(config, files)
    return None if config is None else LoadOverride(config, checked or {})
