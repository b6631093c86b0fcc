"""Keep-alive HTTP/1.1 connections from the activator to replicas, one exchange at a time.

The proxy's upstream client: a pool of idle connections per replica URL and a Protocol that
carries one exchange at a time, framing responses with `response_framing`. It is lean on
purpose (the aiohttp client cost the activator more CPU per request than the rest of the
request path together): a request head is one write, a small response is one wake-up of
the waiting handler, and nothing is parsed beyond framing. Connection failures, resets and bad
framing are `UpstreamFailed` (502); a missed deadline is `UpstreamTimeout` (504). Nothing is
ever replayed: a request that may have reached the replica is never sent again.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit

from activator.errors import ActivatorError, UpstreamFailed, UpstreamTimeout
from activator.surfaces.response_framing import (
    MAX_HEAD_BYTES,
    ChunkedDecoder,
    Framing,
    HeadCache,
    ResponseHead,
)

__all__ = ["Connection", "ResponseHead", "UpstreamPool"]

_READ_HIGH = 1 << 20  # pause reading the replica when this much body waits for the client


class Connection(asyncio.Protocol):
    """One keep-alive connection to a replica; carries one request/response at a time.

    The handler writes the request (`send`, `write` + `drain`), then awaits `response()`
    and, unless the body came with it, `read()` until b"". All parsing happens here in
    `data_received`; the handler wakes once per step, not once per packet.
    """

    def __init__(
        self, base_url: str, heads: HeadCache, on_lost: Callable[[Connection], None]
    ) -> None:
        self.base_url = base_url
        self.transport: asyncio.Transport | None = None
        self.idle_since = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._read_paused = False
        self._heads = heads
        self._on_lost = on_lost
        self._loop = asyncio.get_running_loop()
        self._buf = bytearray()
        self._waiter: asyncio.Future[None] | None = None
        self._drain: asyncio.Future[None] | None = None
        self._write_paused = False
        self._error: ActivatorError | None = None
        self._closed = False
        self._reset(head_request=False)

    def _reset(self, *, head_request: bool) -> None:
        self._active = False  # an exchange is in progress
        self._head_request = head_request
        self._head: ResponseHead | None = None
        self._ready = False  # the handler may proceed past response()
        self._framing = Framing.NONE
        self._whole = False  # a small Content-Length body: handed over with the head
        self._left = 0  # LENGTH: body bytes still to come
        self._chunked: ChunkedDecoder | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._complete = False
        self._keep_alive = True

    # ---- the handler's side ---------------------------------------------------------------

    @property
    def complete(self) -> bool:
        """The current response has fully arrived."""
        return self._complete

    @property
    def reusable(self) -> bool:
        """Idle, open and framed cleanly: may carry another request."""
        return (
            not self._closed
            and self._complete
            and self._keep_alive
            and self._error is None
            and not self._buf
            and self.transport is not None
            and not self.transport.is_closing()
        )

    def begin(self, *, timeout_s: float, head_request: bool = False) -> None:
        """Start an exchange that must be over within `timeout_s` (the response to a HEAD
        request has no body)."""
        self._reset(head_request=head_request)
        self._active = True
        self._timer = self._loop.call_later(timeout_s, self.time_out, timeout_s)

    def finish(self) -> None:
        """The exchange is over (done or given up): disarm its deadline."""
        self._active = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def send(self, data: bytes) -> None:
        if self._error is not None:
            raise self._error
        if self._closed or self.transport is None:
            raise UpstreamFailed("replica closed the connection while the request was sent")
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait while the replica is not reading what was written (flow control)."""
        if self._error is not None:
            raise self._error
        if self._write_paused:
            self._drain = self._loop.create_future()
            await self._drain
            if self._error is not None:
                raise self._error

    async def response(self) -> ResponseHead:
        """The response head; with its body (`head.body`) when that is small and complete."""
        while not self._ready:
            await self._wait()
        assert self._head is not None  # set with _ready
        return self._head

    async def read(self) -> bytes:
        """The next piece of the body; b"" at its end."""
        while not self._chunks:
            if self._complete:
                return b""
            await self._wait()
        data = self._chunks.popleft() if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        if self._read_paused and self.transport is not None and not self._closed:
            self._read_paused = False
            self.transport.resume_reading()
        return data

    def time_out(self, timeout_s: float) -> None:
        """The deadline passed: fail the exchange and drop the connection."""
        self._fail(UpstreamTimeout(f"replica did not answer within {timeout_s:g} s"))

    def close(self) -> None:
        self._closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self._closed = True
        if self.transport is not None:
            self.transport.abort()

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self._error is not None:
            raise self._error

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: ActivatorError) -> None:
        if self._error is None:
            self._error = error
        self.abort()
        self._wake()
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    # ---- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if not self._active or self._complete:
            # Bytes nobody asked for: the framing cannot be trusted any more.
            self._keep_alive = False
            self.abort()
            return
        try:
            if self._head is None:
                self._buf += data
                data = self._parse_head()
                if self._head is None:
                    return
            if data:
                self._feed_body(data)
        except UpstreamFailed as exc:
            self._fail(exc)
            return
        head = self._head
        if head is None:
            return
        if not self._ready:
            if self._whole:
                if not self._complete:
                    return  # a small body: wake the handler once, when all of it is here
                head.body = b"".join(self._chunks)
                self._chunks.clear()
                self._buffered = 0
            self._ready = True
            self._wake()
        elif self._chunks or self._complete:
            self._wake()
        if self._buffered > _READ_HIGH and not self._read_paused and self.transport is not None:
            self._read_paused = True  # the client is slower than the replica
            self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        return None  # close our side too; connection_lost decides what the EOF meant

    def connection_lost(self, exc: Exception | None) -> None:
        was_closed = self._closed
        self._closed = True
        if self._active and not self._complete:
            if exc is None and self._head is not None and self._framing == Framing.UNTIL_CLOSE:
                self._complete = True  # EOF is how this body ends
                self._ready = True
            elif not was_closed or self._error is None:
                reason = f"reset ({exc})" if exc else "closed the connection"
                where = "mid-response" if self._head is not None else "before answering"
                self._fail(UpstreamFailed(f"replica {reason} {where}"))
        self._wake()
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        self._on_lost(self)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    # ---- framing --------------------------------------------------------------------------

    def _parse_head(self) -> bytes:
        """Parse the status line and headers once all are here; returns the bytes after."""
        while True:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEAD_BYTES:
                    raise UpstreamFailed(f"replica response head over {MAX_HEAD_BYTES} bytes")
                return b""
            raw = bytes(self._buf[:end])
            rest = bytes(self._buf[end + 4 :])
            self._buf.clear()
            frame = self._heads.frame(raw, head_request=self._head_request)
            if frame is None:
                self._buf += rest  # an interim answer (100 Continue): the real one follows
                continue
            self._head = frame.head
            self._framing = frame.framing
            self._keep_alive = frame.keep_alive
            self._whole = frame.whole
            self._left = frame.length
            if frame.framing == Framing.CHUNKED:
                self._chunked = ChunkedDecoder()
            self._complete = frame.framing == Framing.NONE or (
                frame.framing == Framing.LENGTH and frame.length == 0
            )
            return rest

    def _feed_body(self, data: bytes) -> None:
        framing = self._framing
        if framing == Framing.LENGTH:
            if len(data) >= self._left:
                if len(data) > self._left:
                    self._keep_alive = False  # bytes past the body: never reuse
                    data = data[: self._left]
                self._left = 0
                self._complete = True
            else:
                self._left -= len(data)
            self._take(data)
        elif self._chunked is not None:
            for piece in self._chunked.feed(data):
                self._take(piece)
            if self._chunked.done:
                self._complete = True
                self._keep_alive = self._keep_alive and not self._chunked.extra
        elif framing == Framing.UNTIL_CLOSE:
            self._take(data)
        else:
            self._keep_alive = False  # a body where none may be

    def _take(self, data: bytes) -> None:
        if data:
            self._chunks.append(data)
            self._buffered += len(data)


class UpstreamPool:
    """Idle keep-alive connections per replica URL (most recently used first)."""

    def __init__(
        self,
        *,
        small_body: int,
        idle_timeout_s: float = 30.0,
        max_idle_per_url: int = 64,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._heads = HeadCache(small=small_body)
        self._idle_timeout_s = idle_timeout_s
        self._max_idle = max_idle_per_url
        self._clock = clock
        self._idle: dict[str, list[Connection]] = {}
        self._addresses: dict[str, tuple[str, int, str]] = {}
        self._closed = False

    def address(self, base_url: str) -> tuple[str, int, str]:
        """(host, port, Host header) of a replica's base URL."""
        found = self._addresses.get(base_url)
        if found is None:
            parts = urlsplit(base_url)
            if parts.scheme != "http" or parts.hostname is None:
                raise UpstreamFailed(f"replica URL {base_url!r} is not http://host:port")
            port = parts.port or 80
            found = (parts.hostname, port, parts.netloc)
            if len(self._addresses) >= 1024:  # replicas come and go (new ports): stay bounded
                self._addresses.clear()
            self._addresses[base_url] = found
        return found

    async def connect(self, base_url: str, *, timeout_s: float) -> Connection:
        """An idle connection to `base_url`, or a new one."""
        idle = self._idle.get(base_url)
        if idle:
            now = self._clock()
            while idle:
                conn = idle.pop()
                if conn.reusable and now - conn.idle_since < self._idle_timeout_s:
                    return conn
                conn.close()
        host, port, _ = self.address(base_url)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                _, conn = await loop.create_connection(
                    lambda: Connection(base_url, self._heads, self._forget), host, port
                )
        except TimeoutError:
            raise UpstreamTimeout(
                f"replica did not accept a connection within {timeout_s:g} s"
            ) from None
        except OSError as exc:
            raise UpstreamFailed(f"replica connection failed: {exc}") from exc
        return conn

    def release(self, conn: Connection) -> None:
        """Back to the pool when it may carry another request; dropped otherwise (an
        exchange cut short leaves bytes in flight, so its connection is aborted)."""
        conn.finish()
        if not conn.reusable:
            if conn.complete:
                conn.close()
            else:
                conn.abort()
            return
        idle = self._idle.get(conn.base_url)
        if self._closed or (idle is not None and len(idle) >= self._max_idle):
            conn.close()
            return
        if idle is None:
            idle = self._idle[conn.base_url] = []
        conn.idle_since = self._clock()
        idle.append(conn)

    def _forget(self, conn: Connection) -> None:
        """A connection closed (by either side): it is no longer idle here."""
        idle = self._idle.get(conn.base_url)
        if idle is not None and conn in idle:
            idle.remove(conn)
            if not idle:
                del self._idle[conn.base_url]

    def idle_count(self, base_url: str) -> int:
        return len(self._idle.get(base_url, ()))

    async def close(self) -> None:
        """Close every idle connection; connections in use close when released."""
        self._closed = True
        for idle in list(self._idle.values()):
            for conn in list(idle):
                conn.close()
        self._idle.clear()
