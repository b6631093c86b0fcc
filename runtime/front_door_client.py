"""Forward a request that arrived on a handed-off connection to `thaw up`'s front door.

A client connection the activator handed to this replica (runtime.handoff) may carry requests
this replica cannot answer as the platform would: server-level paths, other models, aggregated
statistics, the repository API, metrics. Those go back to the front door over HTTP and its
answer is streamed to the client. Hop-by-hop headers (RFC 9110 7.6.1, plus any named in
`Connection`) are stripped both ways. Every forwarded request uses a fresh connection, so the
front door sees its request line first and routes it on its own merits (a pooled connection
that the front door had handed to another replica could otherwise bounce requests around).
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from runtime.handlers import json_response
from thawwire.hop_by_hop import HOP_BY_HOP, connection_tokens
from thawwire.paths import SENT_BACK_QUERY

__all__ = ["FrontDoorClient"]

logger = logging.getLogger(__name__)

# Never copied: hop-by-hop headers, Host (it names this replica) and the length (set again
# from the body actually sent).
_NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length"}
_CHUNK = 256 * 1024


def _end_to_end(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    drop = _NOT_FORWARDED | connection_tokens(headers.getall("Connection", []))
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in drop)


class FrontDoorClient:
    """Streams requests to `url` (the activator) and its answers back; 502 JSON if it fails."""

    def __init__(self, url: str, *, timeout_s: float) -> None:
        self._url = url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True, limit=0),
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Content-Type"),
            )
        return self._session

    async def forward(
        self, request: web.BaseRequest, *, close: bool, body: bytes | None = None
    ) -> web.StreamResponse:
        """The front door's answer to `request`; `close` ends the client connection after it.
        `body`: the request's body, when a handler read it already (runtime.send_back)."""
        headers = _end_to_end(request.headers)
        data: Any = None
        if body is not None:
            headers["Content-Length"] = str(len(body))
            data = body
        elif request.body_exists:
            if request.content_length is not None:
                headers["Content-Length"] = str(request.content_length)
            data = request.content.iter_chunked(_CHUNK)
        try:
            target = request.raw_path
            if body is not None:  # sent back: the front door must serve it, not hand it off
                target += ("&" if "?" in target else "?") + SENT_BACK_QUERY
            upstream = await self._client().request(
                request.method,
                self._url + target,
                headers=headers,
                data=data,
                allow_redirects=False,
                timeout=self._timeout,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            logger.warning("front door request %s failed: %r", request.path[:200], exc)
            error = json_response({"error": f"the front door did not answer: {exc!r}"}, 502)
            error.force_close()
            return error
        try:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            response.headers.update(_end_to_end(upstream.headers))
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            if close:
                response.force_close()
            await response.prepare(request)
            async for chunk in upstream.content.iter_chunked(_CHUNK):
                await response.write(chunk)
            await response.write_eof()
            return response
        except (aiohttp.ClientError, TimeoutError) as exc:
            # Headers are out: the only honest signal left is to cut the connection.
            logger.warning("front door answer to %s broke off: %r", request.path[:200], exc)
            if request.transport is not None:
                request.transport.close()
            return response
        finally:
            upstream.release()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
