"""Streaming HTTP reverse proxy from the activator to one replica; never parses bodies.

Request and response bodies are streamed chunk by chunk. Hop-by-hop headers (RFC 9110 7.6.1,
plus any named in `Connection`) are stripped both ways; compression passes through untouched.
A replica that resets or dies gives `UpstreamFailed` (502); nothing is replayed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from activator.errors import BodyTimeout, PayloadTooLarge, UpstreamFailed, UpstreamTimeout

__all__ = ["HOP_BY_HOP", "SMALL_BODY", "forward", "new_session", "read_body"]

logger = logging.getLogger(__name__)

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
_CHUNK = 256 * 1024
SMALL_BODY = _CHUNK  # declared bodies up to this are read whole before a slot is taken


def new_session() -> aiohttp.ClientSession:
    """A client session for proxying: no connection limit, no decompression, no cookies."""
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
    return aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("User-Agent",),
    )


def end_to_end(headers: CIMultiDictProxy[str] | CIMultiDict[str]) -> CIMultiDict[str]:
    """`headers` minus hop-by-hop ones, including those the Connection header names."""
    named = {
        token.strip().lower()
        for value in headers.getall("Connection", [])
        for token in value.split(",")
    }
    drop = HOP_BY_HOP | named
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in drop)


async def _body(request: web.Request) -> AsyncIterator[bytes]:
    async for chunk in request.content.iter_chunked(_CHUNK):
        yield chunk


async def read_body(request: web.Request, *, limit: int, timeout_s: float) -> bytes:
    """The whole request body (chunked or small); PayloadTooLarge past `limit` bytes,
    BodyTimeout when it has not fully arrived within `timeout_s` (a slow client)."""
    parts: list[bytes] = []
    total = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.content.iter_chunked(_CHUNK):
                total += len(chunk)
                if total > limit:
                    raise PayloadTooLarge(
                        f"request body is over the limit of {limit} bytes (chunked)"
                    )
                parts.append(chunk)
    except TimeoutError:
        raise BodyTimeout(
            f"request body not received within {timeout_s:g} s ({total} bytes arrived)"
        ) from None
    return b"".join(parts)


async def forward(
    request: web.Request,
    base_url: str,
    session: aiohttp.ClientSession,
    *,
    timeout_s: float,
    body: bytes | None = None,
) -> web.StreamResponse:
    """Send `request` (with `body` when it was read already) to the replica at `base_url`
    and stream its answer back."""
    headers = end_to_end(request.headers)
    skip = {"Accept-Encoding", "Content-Type"} - set(headers.keys())
    data: bytes | AsyncIterator[bytes] | None = body
    if body is None and request.body_exists:
        data = _body(request)
    response: web.StreamResponse | None = None
    try:
        async with session.request(
            request.method,
            base_url + request.raw_path,
            headers=headers,
            data=data,
            allow_redirects=False,
            skip_auto_headers=skip,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as upstream:
            out_headers = end_to_end(upstream.headers)
            length = upstream.content_length
            if length is not None and length <= _CHUNK:
                body = await upstream.read()  # small answer: one write, no chunk loop
                out_headers.popall("Content-Length", None)
                return web.Response(
                    status=upstream.status, reason=upstream.reason, body=body, headers=out_headers
                )
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            response.headers.extend(out_headers)
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
    except TimeoutError as exc:
        if response is None:
            raise UpstreamTimeout(f"replica did not answer within {timeout_s:g} s") from exc
        raise _abort(request, response, "timed out mid-response") from exc
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
        if response is None:
            raise UpstreamFailed(f"replica connection failed: {exc or type(exc).__name__}") from exc
        raise _abort(request, response, f"reset mid-response: {exc}") from exc


def _abort(request: web.Request, response: web.StreamResponse, what: str) -> UpstreamFailed:
    # Headers are already out: the only honest signal left is to drop the connection, so the
    # client sees an error instead of a body that looks complete.
    if request.transport is not None:
        request.transport.abort()
    logger.warning("replica %s; client connection aborted", what)
    return UpstreamFailed(f"replica {what}", partial=response)
