"""A cloud's own port (Vertex AI's, SageMaker's) whose requests the v2 application serves:
each rewritten to the v2 request it is by a pure function of the cloud's routes, or refused.

    Rewrite / Refusal / Answer   what a cloud's request is: a v2 request, refused, or the port's own
    json_header_length(...)      an infer body's JSON length from a binary+json Content-Type
    CloudFront(name, rewrite, handle)   the port's request handler
    fix_response_headers(request, response)   the v2 app's `on_response_prepare` hook

The v2 application's handlers, middlewares, deadlines and limits serve every request; only the
routing and a prediction's content type are the cloud's.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from aiohttp import web
from multidict import CIMultiDict

from thawserver.json_response import json_response

__all__ = [
    "HEADER_LENGTH",
    "Answer",
    "CloudFront",
    "Refusal",
    "Respond",
    "Rewrite",
    "fix_response_headers",
    "json_header_length",
]

logger = logging.getLogger(__name__)

HEADER_LENGTH = "Inference-Header-Content-Length"
# Set on a rewritten request whose response headers are the cloud's (its infer responses).
_FIX = "thaw.cloud_response_headers"

FixHeaders = Callable[[web.StreamResponse], None]


@dataclass(frozen=True)
class Rewrite:
    """The v2 request a cloud's request is: its method and path; for an infer request the
    length of the body's JSON (None: the whole body, whatever `Inference-Header-Content-Length`
    said), the request headers it drops (compression the cloud's port does not take), and how
    its response's headers are made the cloud's (None: as the v2 port's)."""

    method: str
    path: str
    infer: bool = False
    header_length: int | None = None
    drop: tuple[str, ...] = ()
    fix: FixHeaders | None = None


Respond = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Answer:
    """A cloud's request that is no v2 request but the port's own (SageMaker's multi-model
    loads): `respond(request)` answers it, outside the v2 application."""

    respond: Respond


@dataclass(frozen=True)
class Refusal:
    """A cloud's request no v2 endpoint serves: its status and reason."""

    status: int
    reason: str


def json_header_length(
    content_type: str, mime: str, content_length: int | None
) -> int | Refusal | None:
    """The JSON length a Content-Type `MIME<N>` gives (`mime` ends in `json-header-size=`), as
    tritonserver's cloud ports read it; None when the type is not `mime` (the body all JSON).
    Refused: `mime` not at the start, a size below 0 or past the body."""
    at = content_type.find(mime)
    if at < 0:
        return None
    if at != 0:
        return Refusal(400, f"expect MIME type for binary data starts with '{mime}', got: "
                       f"{content_type[:200]}")  # fmt: skip
    size = content_type[len(mime) :]
    length = _atoi(size)
    if length < 0 or (content_length is not None and length > content_length):
        upper = content_length if content_length is not None else "body size"
        return Refusal(400, f"inference header size should be in range (0, {upper}), "
                       f"got: {size[:40]}")  # fmt: skip
    return length


def _atoi(text: str) -> int:
    """C's atoi, as Triton reads the size: leading blanks, a sign, the digits that follow; 0
    when there are none (so `json-header-size=abc` is 0, the whole body raw tensor bytes)."""
    match = re.match(r"\s*([+-]?[0-9]{1,20})", text)
    return int(match.group(1)) if match else 0


Rewriter = Callable[[str, str, Mapping[str, str], int | None], Rewrite | Refusal | Answer]


class CloudFront:
    """A cloud port's request handler: each request rewritten (`rewrite(method, path,
    headers, content_length)`) and handled by `handle`, the v2 application's; a refusal
    answered `{"error": ...}` here. `name` opens its verbose records ("Vertex AI request: ...",
    Triton's words)."""

    def __init__(self, name: str, rewrite: Rewriter, handle: Respond) -> None:
        self._name = name
        self._rewrite = rewrite
        self._handle = handle

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s request: %s %s", self._name, request.method, request.path)
        target = self._rewrite(
            request.method, request.path, request.headers, request.content_length
        )
        if isinstance(target, Refusal):
            logger.debug("%s error: %s %s - %d", self._name, request.method, request.path,
                         target.status)  # fmt: skip
            return json_response({"error": target.reason}, status=target.status)
        if isinstance(target, Answer):
            return await target.respond(request)
        # aiohttp re-encodes a clone's headers as strict UTF-8: a value the client sent in
        # other bytes (kept as surrogates) would fail that with a 500, so it is made text.
        headers = CIMultiDict((name, _text(value)) for name, value in request.headers.items())
        for name in target.drop:
            headers.popall(name, None)
        if target.infer:
            headers.popall(HEADER_LENGTH, None)
            if target.header_length is not None:
                headers[HEADER_LENGTH] = str(target.header_length)
        v2 = request.clone(method=target.method, rel_url=target.path, headers=headers)
        if target.fix is not None:
            v2[_FIX] = target.fix  # for a response its handler writes itself (traced)
        response = await self._handle(v2)
        if target.fix is not None and not response.prepared:
            target.fix(response)
        return response


def _text(value: str) -> str:
    """A header value as UTF-8 text: bytes that were not UTF-8 become U+FFFD."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return value


async def fix_response_headers(request: web.Request, response: web.StreamResponse) -> None:
    """The v2 application's `on_response_prepare` hook: a cloud's response headers on a
    response its handler prepares itself (the rest are fixed by CloudFront)."""
    fix = request.get(_FIX)
    if fix is not None:
        fix(response)
