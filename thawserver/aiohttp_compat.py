"""The only code of Thaw that reaches into aiohttp's private parts, each pinned by a test.

Thaw composes aiohttp through its public interfaces: an `asyncio.Protocol` that wraps the
handler a `web.Server` makes (runtime.direct.protocol), middlewares and `on_response_prepare`
(runtime.direct.routing). Two needs have no public hook:

- A request aiohttp cannot parse (request line, header, chunk framing, length) is answered by
  `RequestHandler.handle_error` in text/plain, before any middleware runs, and logged with its
  traceback at ERROR; Thaw's error bodies are JSON, and such a request (the client's fault) is
  one line at DEBUG. `JsonErrorRunner` is an `AppRunner` whose server makes handlers of a
  subclass that answers those (and the 500 of an exception that escaped every middleware) with
  thawwire.bad_http's JSON. It relies on: `BaseRunner._make_server` (awaited by `setup()`),
  the keyword arguments a `Server` keeps for its handlers (`Server._kwargs`), and
  `RequestHandler(manager, loop=..., **kwargs)` calling `handle_error(request, status, exc,
  message)` for an unparsable request.
- Requests aiohttp has parsed but not yet handled on a connection (a pipelining client):
  `has_queued_requests` reads `RequestHandler._messages`.
- An `Expect` other than `100-continue` is answered by aiohttp's default expect handler with
  a text/plain 417 before any middleware runs; Triton ignores such an expectation (observed
  on 2.51), as RFC 9110 §10.1.1 allows. The runner's request factory drops the field from
  such a request before aiohttp reads it. It relies on the factory's arguments: the parsed
  message first (a `RawRequestMessage`, C or Python: `headers`, `raw_headers`, `_replace`).
- Every response's `Server` field is aiohttp's `SERVER_SOFTWARE` unless the handler set one:
  `Python/3.11 aiohttp/3.14.5`, the exact versions a scanner matches against known parser
  flaws (Triton sends no `Server` field). The runner's setup names the server `thaw` instead,
  through that module global of `aiohttp.web_response` (no per-response work).

tests/unit/thawwire/test_aiohttp_compat.py pins each of these against the installed aiohttp;
an import-linter contract keeps `aiohttp.web_protocol` out of every other module.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web, web_response
from aiohttp.web_protocol import RequestHandler
from multidict import CIMultiDict, CIMultiDictProxy

from thawwire.bad_http import error_body

__all__ = ["SERVER_NAME", "JsonErrorRunner", "has_queued_requests", "server_beside"]

SERVER_NAME = "thaw"
"""Every response's `Server` field: no Python or aiohttp version."""


class _JsonErrorHandler(RequestHandler):
    """aiohttp's handler, answering what it cannot parse as `{"error": ...}`."""

    __slots__ = ()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status < 500:
            # A request that is not HTTP enough is the client's fault, and a hostile client
            # can send one per connection: one line at debug, not aiohttp's traceback at error
            # per request (a log an attacker could fill). The check below is aiohttp's own.
            self.logger.debug("unparsable request from %s: %s", request.remote, exc)
            if request.writer.output_size > 0:
                raise ConnectionError("the answer has started: no error answer can follow")
            text = message
        else:
            plain = super().handle_error(request, status, exc, message)
            text = plain.text if isinstance(plain, web.Response) else None
        response = web.Response(
            body=error_body(status, text), status=status, content_type="application/json"
        )
        # The stream is in an unknown state after a framing error: never reuse it.
        response.force_close()
        return response


class _JsonErrorServer(web.Server):
    """A `web.Server` whose connections get `_JsonErrorHandler`s."""

    def __call__(self) -> RequestHandler:
        return _JsonErrorHandler(self, loop=asyncio.get_running_loop(), **self._kwargs)


# The least `JsonErrorRunner.cleanup` waits for requests in flight (seconds).
_LEAST_SHUTDOWN_S = 0.1


class JsonErrorRunner(web.AppRunner):
    """An `AppRunner` (same arguments) whose server answers unparsable requests in JSON;
    `runner.server` is the protocol factory for every connection of the app, as usual."""

    @property
    def shutdown_timeout_s(self) -> float:
        """How long `cleanup` waits for requests in flight (aiohttp's `shutdown_timeout`)."""
        return float(self._shutdown_timeout)

    @shutdown_timeout_s.setter
    def shutdown_timeout_s(self, seconds: float) -> None:
        # aiohttp's own sites set this attribute the same way (web_runner.BaseSite). It reads
        # a timeout of 0 as none at all: the least this waits is a moment.
        self._shutdown_timeout = max(seconds, _LEAST_SHUTDOWN_S)

    async def _make_server(self) -> web.Server:
        web_response.SERVER_SOFTWARE = SERVER_NAME
        made = await super()._make_server()
        return _JsonErrorServer(
            made.request_handler,
            request_factory=_ignoring_unknown_expectations(made.request_factory),
            handler_cancellation=made.handler_cancellation,
            **made._kwargs,
        )


def server_beside(
    server: web.Server, handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
) -> web.Server:
    """A server for another listener of `server`'s app (a `JsonErrorRunner`'s): its requests
    are made as `server`'s (the app's requests, JSON errors for unparsable ones) and go to
    `handler`, which may hand them to `server.request_handler` (the app)."""
    return _JsonErrorServer(
        handler,
        request_factory=server.request_factory,
        handler_cancellation=server.handler_cancellation,
        **server._kwargs,  # the runner's options (as JsonErrorRunner reads them above)
    )


def _ignoring_unknown_expectations(factory: Any) -> Any:
    """`factory` (a `web.Server`'s request factory), making requests whose `Expect` is not
    `100-continue` as if they had none (Triton ignores such an expectation)."""

    def make(message: Any, *args: Any, **kwargs: Any) -> web.BaseRequest:
        expect = message.headers.get("Expect")
        if expect is not None and expect.strip().lower() != "100-continue":
            headers = CIMultiDict(message.headers)
            headers.popall("Expect")
            raw = tuple(pair for pair in message.raw_headers if pair[0].lower() != b"expect")
            message = message._replace(headers=CIMultiDictProxy(headers), raw_headers=raw)
        request: web.BaseRequest = factory(message, *args, **kwargs)
        return request

    return make


def has_queued_requests(handler: asyncio.BaseProtocol) -> bool:
    """Whether aiohttp's `handler` holds parsed requests it has not started handling yet.
    False for a handler without that queue (another aiohttp or another protocol)."""
    queue = getattr(handler, "_messages", None)
    return isinstance(queue, deque) and len(queue) > 0
