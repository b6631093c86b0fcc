"""Refusing a request framed with a transfer coding the server does not implement.

Both servers decode `chunked` (aiohttp's parser, which also refuses `chunked` anywhere but last),
and nothing else: a `Transfer-Encoding: gzip, chunked` body would reach a handler still
compressed, parsed as if it were JSON or tensor bytes. RFC 9112 §6.1: "A server that receives a
request message with a transfer coding it does not understand SHOULD respond with 501 (Not
Implemented)", which is what `refuse_unknown_codings` answers, in JSON, before any handler runs.
The body's end is known (chunked is last), so the connection stays usable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from thawserver.json_response import json_response

__all__ = ["coding_refusal", "refuse_unknown_codings", "unsupported_codings"]

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SUPPORTED = frozenset({"chunked"})


def unsupported_codings(header: str) -> list[str]:
    """The codings of a `Transfer-Encoding` value the servers do not implement, in order
    (parameters and case ignored; empty list elements skipped, as RFC 9110 §5.6.1 allows)."""
    codings = (item.split(";", 1)[0].strip().lower() for item in header.split(","))
    return [coding for coding in codings if coding and coding not in SUPPORTED]


def coding_refusal(request: web.Request) -> web.Response | None:
    """The 501 `{"error": ...}` for a request with a transfer coding other than `chunked`;
    None for the rest (a server's own middleware may call this instead of adding
    `refuse_unknown_codings`: one middleware fewer for every request)."""
    header = request.headers.get("Transfer-Encoding")
    if header is None:
        return None
    unknown = unsupported_codings(header)
    if not unknown:
        return None
    names = ", ".join(repr(coding[:40]) for coding in unknown[:4])
    message = f"transfer coding {names} is not implemented; only 'chunked' is"
    return json_response({"error": message}, status=501)


@web.middleware
async def refuse_unknown_codings(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """501 `{"error": ...}` for a request with a transfer coding other than `chunked`."""
    refusal = coding_refusal(request)
    if refusal is not None:
        return refusal
    return await handler(request)
