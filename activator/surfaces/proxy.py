"""Streaming HTTP reverse proxy from the activator to one replica; never parses bodies.

Request and response bodies are streamed chunk by chunk; small ones (up to `SMALL_BODY`) go
in one write. Hop-by-hop headers (RFC 9110 7.6.1, plus any named in `Connection`) are
stripped both ways; compression passes through untouched. Connections to replicas are kept
alive in an `UpstreamPool`. A replica that resets or dies gives `UpstreamFailed` (502);
nothing is replayed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from activator.endpoint.model_endpoint import ModelEndpoint
from activator.endpoint.sequence_routes import SequenceKey
from activator.errors import BodyTimeout, PayloadTooLarge, UpstreamFailed, UpstreamTimeout
from activator.surfaces.upstream import UpstreamPool
from thawserver.body_limit import too_large_text
from thawwire.hop_by_hop import HOP_BY_HOP, connection_tokens
from thawwire.internal_calls import HEADER as INTERNAL_HEADER
from thawwire.internal_calls import InternalCalls
from thawwire.model_control import NOT_LOADED

__all__ = [
    "SMALL_BODY",
    "Answer",
    "exchange",
    "forward",
    "new_pool",
    "new_session",
    "read_body",
    "to_replica",
]

logger = logging.getLogger(__name__)

_CHUNK = 256 * 1024
SMALL_BODY = _CHUNK  # declared bodies up to this are read whole before a slot is taken
# Request headers never copied to the replica: hop-by-hop ones, Host (it names the activator),
# the length (the proxy frames the body itself) and Expect (the body is sent at once; a
# 100 Continue would only cost time).
_NOT_FORWARDED = frozenset(
    name.encode() for name in HOP_BY_HOP | {"host", "content-length", "expect"}
)


def new_session(internal: InternalCalls | None = None) -> aiohttp.ClientSession:
    """A client session for the activator's own calls to replicas (load, statistics):
    no connection limit, no decompression, no cookies. With the deployment's `internal`
    token every call carries it (thawwire.internal_calls): a load's override files pass the
    replica up to the internal body cap, as they passed the front door (a Python model's
    `pb_utils.load_model`). Never a client's request: those go through `new_pool`."""
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
    return aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("User-Agent",),
        headers={INTERNAL_HEADER: internal.token} if internal is not None else None,
    )


def new_pool() -> UpstreamPool:
    """Keep-alive connections for proxied requests; responses up to SMALL_BODY come whole."""
    return UpstreamPool(small_body=_CHUNK, idle_timeout_s=30.0)


async def read_body(request: web.Request, *, limit: int, timeout_s: float) -> bytes:
    """The whole request body (chunked or small); PayloadTooLarge past `limit` bytes,
    BodyTimeout when it has not fully arrived within `timeout_s` (a slow client)."""
    content = request.content
    if content.is_eof() and content.total_bytes <= limit:
        return content.read_nowait()  # all of it came with the head: no wait, no timer
    parts: list[bytes] = []
    total = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in content.iter_chunked(_CHUNK):
                total += len(chunk)
                if total > limit:
                    raise PayloadTooLarge(too_large_text(limit))
                parts.append(chunk)
    except TimeoutError:
        raise BodyTimeout(
            f"request body not received within {timeout_s:g} s ({total} bytes arrived)"
        ) from None
    return b"".join(parts)


# Dropped from a request whose body the activator rewrote (activator.surfaces.shm_requests): the
# replica gets plain bytes with their own header length, and answers uncompressed.
_REWRITTEN = frozenset(
    {b"inference-header-content-length", b"content-encoding", b"accept-encoding"}
)


async def to_replica(
    endpoint: ModelEndpoint,
    size: int,
    send: Callable[[str], Awaitable[web.StreamResponse]],
    *,
    model: str,
    replayable: bool,
    sequence: SequenceKey | None = None,
) -> web.StreamResponse:
    """Hold for a replica slot of `endpoint` (its model woken if at zero), then `send` the
    request to that replica's URL. A replica that fails the exchange is reported to the
    endpoint; an answer it had already started is returned as it stands (its client has the
    head), else the UpstreamFailed is raised.

    A replica that answers it does not have `model` loaded (an error marked NOT_LOADED: evicted
    from a shared replica, or unloaded by another activator, after this one last heard) is
    taken out of rotation, and a `replayable` request (its body in memory; no sequence bound
    to that replica) is sent once more, to a replica that has it: the model never saw it. A
    second such answer, or one to a request that cannot be sent again, goes to the client."""
    retry = replayable and sequence is None
    while True:
        async with endpoint.acquire(size, sequence=sequence) as replica:
            try:
                response = await send(replica.url)
            except UpstreamFailed as exc:
                endpoint.replica_failed(replica, exc.message)
                if isinstance(exc.partial, web.StreamResponse):
                    return exc.partial
                raise
            if not _not_loaded(response, model):
                return response
            endpoint.replica_failed(replica, f"model '{model}' is not loaded there")
            if not retry:
                return response
            logger.info("model=%s not loaded on replica %s: sent again", model, replica.id)
            retry = False


def _not_loaded(response: web.StreamResponse, model: str) -> bool:
    """The replica's answer says it does not have `model` loaded (and it was not sent yet)."""
    return not response.prepared and response.headers.get(NOT_LOADED) == model


def request_head(
    request: web.Request, host: str, length: int | None, *, rewritten: bool = False
) -> bytes:
    """The request line and end-to-end headers for the replica, as sent by the client
    (byte-exact), with the replica's Host and the body's Content-Length (`rewritten`: without
    the client's framing and encoding headers, which the caller writes itself)."""
    parts = [
        f"{request.method} {request.raw_path} HTTP/1.1\r\nHost: {host}\r\n".encode(
            "utf-8", "surrogateescape"
        )
    ]
    drop = _NOT_FORWARDED | _REWRITTEN if rewritten else _NOT_FORWARDED
    named = connection_tokens(request.headers.getall("Connection", ()))
    if named:  # the client names more hop-by-hop headers
        drop = drop | {token.encode("ascii", "ignore") for token in named}
    for name, value in request.raw_headers:
        if name.lower() not in drop:
            parts += (name, b": ", value, b"\r\n")
    if length is not None:
        parts.append(b"Content-Length: %d\r\n" % length)
    if not rewritten:
        parts.append(b"\r\n")
    return b"".join(parts)


class Answer:
    """A replica's whole answer to an `exchange`."""

    __slots__ = ("body", "headers", "reason", "status")

    def __init__(self, status: int, reason: str, headers: Any, body: bytes) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body


async def exchange(
    request: web.Request,
    base_url: str,
    pool: UpstreamPool,
    *,
    body: bytes,
    header_length: int | None,
    timeout_s: float,
) -> Answer:
    """Send `request` with a body the activator wrote (`header_length`: its JSON header's) to
    the replica at `base_url` and read its whole, uncompressed answer."""
    conn = await pool.connect(base_url, timeout_s=timeout_s)
    try:
        conn.begin(timeout_s=timeout_s)
        head = request_head(request, pool.address(base_url)[2], len(body), rewritten=True)
        if header_length is not None:
            head += b"Inference-Header-Content-Length: %d\r\n" % header_length
        conn.send(head + b"\r\n" + body)
        answer = await conn.response()
        data = answer.body
        if data is None:
            parts = []
            while chunk := await conn.read():
                parts.append(chunk)
            data = b"".join(parts)
        return Answer(answer.status, answer.reason, answer.headers, data)
    finally:
        pool.release(conn)


async def forward(
    request: web.Request,
    base_url: str,
    pool: UpstreamPool,
    *,
    timeout_s: float,
    body_timeout_s: float | None = None,
    body: bytes | None = None,
) -> web.StreamResponse:
    """Send `request` (with `body` when it was read already) to the replica at `base_url`
    and stream its answer back; a body streamed from the client must be through within
    `body_timeout_s` (and never past `timeout_s`)."""
    streamed = body is None and request.body_exists
    if streamed:
        length = request.content_length
        if length is None:  # the caller reads chunked bodies whole; a length is never guessed
            raise UpstreamFailed("a request body of unknown length cannot be streamed")
    elif body is None and request.method in ("GET", "HEAD"):
        length = None
    else:
        length = len(body or b"")
    conn = await pool.connect(base_url, timeout_s=timeout_s)
    response: web.StreamResponse | None = None
    try:
        conn.begin(timeout_s=timeout_s, head_request=request.method == "HEAD")
        head = request_head(request, pool.address(base_url)[2], length)
        if streamed:
            conn.send(head)
            # The exchange's own deadline aborts the replica side only; a client that stops
            # sending its body mid-way is bounded here, or it would hold its slot for good.
            within_s = min(timeout_s, body_timeout_s or timeout_s)
            try:
                async with asyncio.timeout(within_s):
                    async for chunk in request.content.iter_chunked(_CHUNK):
                        conn.send(chunk)
                        await conn.drain()
            except TimeoutError:
                raise UpstreamTimeout(
                    f"request body not sent to the replica within {within_s:g} s"
                ) from None
        else:
            conn.send(head + body if body else head)
        answer = await conn.response()
        if answer.body is not None:  # small answer: one write, no chunk loop
            return web.Response(
                status=answer.status, reason=answer.reason, body=answer.body,
                headers=answer.headers,
            )  # fmt: skip
        response = web.StreamResponse(
            status=answer.status, reason=answer.reason, headers=answer.headers
        )
        await response.prepare(request)
        while chunk := await conn.read():
            await response.write(chunk)
        await response.write_eof()
        return response
    except UpstreamTimeout as exc:
        if response is None:
            raise
        raise _abort(request, response, "timed out mid-response") from exc
    except UpstreamFailed as exc:
        if response is None:
            raise
        raise _abort(request, response, exc.message.removeprefix("replica ")) from exc
    except ConnectionResetError:
        if response is None:
            raise
        # The client left mid-response: the replica did nothing wrong and stays in rotation;
        # the unfinished exchange with it is dropped (released below, never reused).
        logger.debug("client left mid-response on %s", request.path)
        return response
    finally:
        pool.release(conn)  # back to the pool only when the exchange finished cleanly


def _abort(request: web.Request, response: web.StreamResponse, what: str) -> UpstreamFailed:
    # Headers are already out: the only honest signal left is to drop the connection, so the
    # client sees an error instead of a body that looks complete.
    if request.transport is not None:
        request.transport.abort()
    logger.warning("replica %s; client connection aborted", what)
    return UpstreamFailed(f"replica {what}", partial=response)
