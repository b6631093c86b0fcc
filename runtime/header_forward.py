"""tritonserver's `--http-header-forward-pattern` / `--grpc-header-forward-pattern`: the request
headers (gRPC metadata) whose name matches become string parameters of the infer request.

As Triton (src/command_line_parser.cc, src/http_server.cc, src/grpc/infer_handler.h): the
pattern is matched case-insensitively (Triton prefixes RE2's `(?i)`) anywhere in the name (RE2
PartialMatch), a leading `(?-i)` makes it case-sensitive again, and each match is added under
the header's own name with its value, after the body's parameters (a header wins a clash).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from thawwire.internal_calls import HEADER

__all__ = ["compile_pattern", "forwarded_headers"]

_CASE_SENSITIVE = "(?-i)"
_TOKEN_HEADER = HEADER.lower()


def compile_pattern(text: str, *, setting: str = "header_forward_pattern") -> re.Pattern[str]:
    """The compiled pattern; ValueError in the config's form for one that does not compile.

    RE2's `(?-i)` (flags off until the end of the group) has no global form in Python's `re`;
    at the start of the pattern it is the same as compiling without IGNORECASE."""
    source, flags = text, re.IGNORECASE
    if source.startswith(_CASE_SENSITIVE):
        source, flags = source[len(_CASE_SENSITIVE) :], re.NOFLAG
    try:
        return re.compile(source, flags)
    except re.error as exc:
        raise ValueError(f"`{setting}` = {text!r}, must be a regular expression: {exc}") from exc


def forwarded_headers(
    pattern: re.Pattern[str] | None, headers: Iterable[tuple[Any, Any]]
) -> dict[str, str]:
    """{name: value} of the headers whose name matches `pattern` ({} without one). Names and
    values may be `bytes` (aiohttp's raw headers, binary gRPC metadata): read as latin-1,
    byte for byte, as Triton copies them. The deployment's token (thawwire.internal_calls)
    is never one of them, whatever the pattern: a model must not see a secret."""
    if pattern is None:
        return {}
    found: dict[str, str] = {}
    for name, value in headers:
        key = name.decode("latin-1") if isinstance(name, bytes) else str(name)
        if pattern.search(key) and key.lower() != _TOKEN_HEADER:
            found[key] = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return found
