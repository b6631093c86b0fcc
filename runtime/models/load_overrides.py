"""A repository load request's overrides, checked: a config (JSON text) and model files by path.

Both protocols carry them (REST: `parameters.config` and base64 `file:<path>` strings; gRPC:
`string_param` and `bytes_param` of the same keys) and both check them here, so a bad override
gets one answer whichever way it came.
"""

from __future__ import annotations

import json
from typing import Any

from runtime.errors import InvalidInput

__all__ = ["check_config", "check_load_path", "load_overrides"]

_LOAD_FAILED = "failed to poll from model repository"
# Linux's NAME_MAX and PATH_MAX, in bytes: a `file:` path past them cannot be written.
_NAME_MAX_BYTES = 255
_PATH_MAX_BYTES = 4095


def check_config(config: Any) -> str | None:
    """The `config` override as JSON text holding an object, or None when absent."""
    if config is None:
        return None
    if not isinstance(config, str):
        raise InvalidInput("parameter 'config' must be a JSON string")
    try:
        if not isinstance(json.loads(config), dict):
            raise InvalidInput("parameter 'config' must hold a JSON object")
    except (ValueError, RecursionError):
        raise InvalidInput("parameter 'config' is not valid JSON") from None
    return config


def load_overrides(
    config: str | None, files: dict[str, bytes]
) -> tuple[str | None, dict[str, bytes] | None]:
    """The (config, files) a load goes with: files only together with a config."""
    if files and config is None:
        raise InvalidInput(
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
        raise InvalidInput(f"load file path {shown} must be relative, without '..'")
    try:
        encoded = [part.encode("utf-8") for part in parts]
    except UnicodeEncodeError:
        raise InvalidInput(f"{_LOAD_FAILED}: load file path {shown} is not valid UTF-8") from None
    longest = max(len(part) for part in encoded)
    if longest > _NAME_MAX_BYTES:
        raise InvalidInput(
            f"{_LOAD_FAILED}: load file path {shown} has a component of {longest} bytes; "
            f"a file name can have at most {_NAME_MAX_BYTES}"
        )
    if sum(len(part) + 1 for part in encoded) > _PATH_MAX_BYTES:
        raise InvalidInput(
            f"{_LOAD_FAILED}: load file path {shown} is longer than {_PATH_MAX_BYTES} bytes"
        )
