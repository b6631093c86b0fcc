"""The one JSON response both servers write: compact, `application/json` without a charset.

Triton writes its JSON answers compactly and with `Content-Type: application/json` (no
charset parameter); `thaw serve` and `thaw up` answer the same way from this one function, so a
client cannot tell which of them wrote a body.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from thawserver import fast_json

__all__ = ["JSON", "json_response"]

JSON = "application/json"


def json_response(
    payload: Any, status: int = 200, *, headers: Mapping[str, str] | None = None
) -> web.Response:
    """`payload` as a compact JSON response (thawserver.fast_json: the stdlib's meaning)."""
    return web.Response(
        body=fast_json.dumps(payload), status=status, headers=headers, content_type=JSON
    )
