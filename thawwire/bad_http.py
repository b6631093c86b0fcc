"""The JSON answer to a request that is not HTTP enough to route (framing, header, chunk, length).

aiohttp writes such answers in text/plain before any application code runs; every Thaw error
body is `{"error": ...}` instead, with aiohttp's text on one line as the reason.
"""

from __future__ import annotations

import json
from http import HTTPStatus

__all__ = ["MAX_REASON_CHARS", "error_body", "error_reason"]

MAX_REASON_CHARS = 300


def error_reason(status: int, text: str | None) -> str:
    """aiohttp's plain-text answer as one line of at most MAX_REASON_CHARS, or the status's
    phrase when it had none."""
    reason = " ".join((text or "").split())[:MAX_REASON_CHARS]
    if reason:
        return reason
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Bad Request"


def error_body(status: int, text: str | None) -> bytes:
    """The JSON body `{"error": reason}` of that answer."""
    return json.dumps({"error": error_reason(status, text)}, separators=(",", ":")).encode()
