"""The model-name and version rules of the v2 API: what a URL, a directory or a message may name.

One rule for every side. A model name is a directory name of the repository, so it is at most
255 characters (the longest file name Linux allows; the names are ASCII, so characters are
bytes), starts with a letter, digit or `_`, and continues with those, `.`, `-` and `,`, never
`..`: never a path, a shell word or a control character (the comma: Triton's own QA repositories
name models by their dims, `nop_TYPE_FP32_1,2`). Triton sets no shorter limit, and a name
`thaw serve` serves must be one `thaw up` serves too. A version is what Triton's is, an int64:
1 to 19 ASCII digits whose value fits in a signed 64-bit integer. Triton reads a version string
with `std::stol`, so a request's `01` means version 1 (`canonical_version`), and a run of digits
past int64 is refused with its words (`version_refusal`, 400 / INVALID_ARGUMENT).
"""

from __future__ import annotations

import re

__all__ = [
    "INT64_MAX",
    "MAX_MODEL_NAME_CHARS",
    "canonical_version",
    "is_digits",
    "is_model_name",
    "is_version",
    "unknown_model",
    "version_not_available",
    "version_refusal",
]

MAX_MODEL_NAME_CHARS = 255
INT64_MAX = (1 << 63) - 1
# Matched with `fullmatch`: `$` in `re.match` would also accept a trailing newline.
_MODEL_NAME = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_.,\-]{{0,{MAX_MODEL_NAME_CHARS - 1}}}")
_VERSION = re.compile(r"[0-9]{1,19}")
_DIGITS = re.compile(r"[0-9]+")


def is_model_name(name: object) -> bool:
    """True for a plain model name (see the module docstring)."""
    return isinstance(name, str) and bool(_MODEL_NAME.fullmatch(name)) and ".." not in name


def is_version(text: object) -> bool:
    """True for a version as a URL names it: decimal digits whose value fits int64."""
    return isinstance(text, str) and bool(_VERSION.fullmatch(text)) and int(text) <= INT64_MAX


def is_digits(text: str) -> bool:
    """True for ASCII decimal digits only (what Triton's HTTP routes take as a version)."""
    return bool(_DIGITS.fullmatch(text))


def canonical_version(text: str) -> str | None:
    """A request's version string as Triton reads it (`std::stol` of its digits): `01` is
    `1`; None for what is no version (not all digits, or past int64)."""
    if not is_digits(text):
        return None
    stripped = text.lstrip("0") or "0"
    return stripped if is_version(stripped) else None


def version_refusal(version: str) -> str:
    """Triton 2.51's text for a version string that is no version (HTTP 400 for digits past
    int64, gRPC INVALID_ARGUMENT for any): `version` at most 40 characters of it."""
    if version.startswith("-") and version[1:].isdigit():
        return (
            f"invalid model version specified '{version}' , version should be an integral value > 0"
        )
    return (
        f"failed to get model version from specified version string '{version}' (details: "
        "stol), version should be an integral value > 0"
    )


def unknown_model(name: str) -> str:
    """Triton's text for a model no repository holds, also for what is no model name (a name
    that could be a path is one no repository holds): 404 / NOT_FOUND. At most 200 characters
    of `name`."""
    return f"Request for unknown model: '{name[:200]}' is not found"


def version_not_available(name: str) -> str:
    """Triton 2.51's text for the statistics of a version not ready (unloaded, or never there)
    of a model that has one (core `TRITONSERVER_ServerModelStatistics`). At most 200
    characters of `name`."""
    return f"requested model version is not available for model '{name[:200]}'"
