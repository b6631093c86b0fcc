"""Answer requests aiohttp cannot parse (bad request line, header, chunk, length) in JSON.

aiohttp rejects malformed HTTP framing inside its protocol handler, before the app and its
error middleware see a request, and writes a text/plain page; DESIGN.md wants every error body
to be `{"error": ...}`. `JsonParseErrorRunner` is an `AppRunner` whose connections are handled
by a `RequestHandler` that rewrites those answers.
"""

from __future__ import annotations

import json
from http import HTTPStatus

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

__all__ = ["JsonParseErrorRunner"]


class _JsonErrorHandler(RequestHandler):
    __slots__ = ()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        plain = super().handle_error(request, status, exc, message)
        text = (plain.text if isinstance(plain, web.Response) else None) or ""
        reason = " ".join(text.split())[:300] or HTTPStatus(status).phrase
        body = json.dumps({"error": reason}, separators=(",", ":")).encode()
        response = web.Response(body=body, status=status, content_type="application/json")
        # The stream is in an unknown state after a framing error: never reuse it.
        response.force_close()
        return response


class _JsonErrorServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _JsonErrorHandler(self, loop=self._loop, **self._kwargs)


class JsonParseErrorRunner(web.AppRunner):
    """An `AppRunner` whose low-level server answers unparsable requests as JSON errors."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        if type(server) is web.Server:
            server.__class__ = _JsonErrorServer
        return server
