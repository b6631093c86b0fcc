"""HTTP/1.1 response framing (RFC 9112 section 6): where a replica's response body ends.

Pure functions over bytes: parse a response head, decide its framing (none, Content-Length,
chunked, until the connection closes) and whether the connection may carry another request,
and decode a chunked body fed in arbitrary pieces. Anything malformed is `UpstreamFailed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from multidict import CIMultiDict, CIMultiDictProxy

from activator.errors import UpstreamFailed
from thawwire.hop_by_hop import HOP_BY_HOP, connection_tokens

__all__ = [
    "MAX_HEAD_BYTES",
    "ChunkedDecoder",
    "Frame",
    "Framing",
    "HeadCache",
    "ResponseHead",
    "frame_response",
    "parse_head",
]

MAX_HEAD_BYTES = 64 * 1024  # status line + headers of one response; also one chunk line
_NO_BODY_STATUS = frozenset({204, 304})
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_HEX = frozenset(b"0123456789abcdefABCDEF")


class Framing(IntEnum):
    """How a response body ends."""

    NONE = 0  # no body: HEAD, 1xx, 204, 304
    LENGTH = 1  # after Content-Length bytes
    CHUNKED = 2  # at the last chunk and its trailers
    UNTIL_CLOSE = 3  # when the replica closes the connection


@dataclass(slots=True)
class ResponseHead:
    """A replica's response: status, reason, its end-to-end headers (hop-by-hop ones and those
    its Connection header names are gone, as is Content-Length when `body` is set), and the
    whole body when it was small enough to be handed over in one piece."""

    status: int
    reason: str
    headers: CIMultiDictProxy[str]  # read-only: one head's headers may serve many responses
    body: bytes | None = None


@dataclass(slots=True)
class Frame:
    """A parsed head and how its body ends; `length` is the Content-Length for LENGTH;
    `whole` means the body is small enough to be handed over with the head."""

    head: ResponseHead
    framing: Framing
    length: int
    keep_alive: bool
    whole: bool


def parse_head(raw: bytes) -> tuple[int, str, list[tuple[str, str]], bool]:
    """Status, reason and header fields of a response head (without its final CRLFCRLF), and
    whether it is HTTP/1.0 (whose connections close unless they say keep-alive)."""
    lines = raw.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0") or not parts[1].isdigit():
        raise UpstreamFailed(f"replica sent a bad status line: {lines[0][:80]!r}")
    status = int(parts[1])
    if not 100 <= status <= 999:
        raise UpstreamFailed(f"replica sent a bad status line: {lines[0][:80]!r}")
    reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
    fields = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or not _TOKEN.issuperset(name):
            raise UpstreamFailed(f"replica sent a bad header line: {line[:80]!r}")
        fields.append(
            (name.decode("ascii"), value.strip(b" \t").decode("utf-8", "surrogateescape"))
        )
    return status, reason, fields, parts[0] == b"HTTP/1.0"


def frame_response(
    status: int,
    reason: str,
    fields: list[tuple[str, str]],
    *,
    head_request: bool,
    small: int,
    http10: bool = False,
) -> Frame:
    """The framing of a final (non-1xx) response to a request (`head_request` for HEAD);
    bodies up to `small` bytes with a Content-Length are marked `whole`."""
    kept: list[tuple[str, str]] = []
    lengths: set[str] = set()
    codings: list[str] = []
    connection_values: list[str] = []
    for name, value in fields:
        lower = name.lower()
        if lower not in HOP_BY_HOP:
            if lower == "content-length":
                lengths.add(value)
            kept.append((name, value))
        elif lower == "transfer-encoding":
            codings += (c.strip().lower() for c in value.split(","))
        elif lower == "connection":
            connection_values.append(value)
    connection = connection_tokens(connection_values)
    if connection:  # it names more hop-by-hop headers
        kept = [(n, v) for n, v in kept if n.lower() not in connection]
    codings = [c for c in codings if c]
    headers = CIMultiDict(kept)
    head = ResponseHead(status, reason, CIMultiDictProxy(headers))
    keep_alive = "keep-alive" in connection if http10 else "close" not in connection
    if head_request or status in _NO_BODY_STATUS or status == 101:
        return Frame(head, Framing.NONE, 0, keep_alive and status != 101, whole=False)
    if codings and codings[-1] == "chunked":
        headers.popall("Content-Length", None)  # a length beside chunked is a smuggling sign
        return Frame(head, Framing.CHUNKED, 0, keep_alive and not lengths, whole=False)
    if codings or not lengths:
        return Frame(head, Framing.UNTIL_CLOSE, 0, keep_alive=False, whole=False)
    if len(lengths) > 1 or not all(v.isdigit() for v in lengths):
        raise UpstreamFailed(f"replica sent a bad Content-Length: {sorted(lengths)}")
    length = int(lengths.pop())
    whole = length <= small
    if whole:
        headers.popall("Content-Length", None)  # the body is handed over in one piece
    return Frame(head, Framing.LENGTH, length, keep_alive, whole)


class HeadCache:
    """`parse_head` + `frame_response` remembered by the raw head bytes: a replica answers
    with the same head (same Date second, same length) over and over, so most responses skip
    parsing. Bounded: it starts over when full. None means an interim (1xx) response."""

    def __init__(self, *, small: int, max_entries: int = 256) -> None:
        self._small = small
        self._max = max_entries
        self._frames: dict[tuple[bytes, bool], Frame | None] = {}

    def __len__(self) -> int:
        return len(self._frames)

    def frame(self, raw: bytes, *, head_request: bool) -> Frame | None:
        key = (raw, head_request)
        try:
            frame = self._frames[key]
        except KeyError:
            frame = self._frames[key] = self._parse(raw, head_request)
            if len(self._frames) > self._max:
                self._frames.clear()
        if frame is None:
            return None
        head = frame.head  # a fresh head per response: its `body` is that response's own
        return Frame(
            ResponseHead(head.status, head.reason, head.headers),
            frame.framing,
            frame.length,
            frame.keep_alive,
            frame.whole,
        )

    def _parse(self, raw: bytes, head_request: bool) -> Frame | None:
        status, reason, fields, http10 = parse_head(raw)
        if 100 <= status < 200 and status != 101:
            return None
        return frame_response(
            status, reason, fields, head_request=head_request, small=self._small, http10=http10
        )


class ChunkedDecoder:
    """Decodes a chunked body fed in any pieces; `done` after the last chunk's trailers,
    `extra` when bytes followed them (the connection must not be reused)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._state = 0  # 0 size line, 1 data, 2 CRLF after data, 3 trailers
        self._left = 0  # bytes of the current chunk still to come
        self.done = False
        self.extra = False

    def feed(self, data: bytes) -> list[bytes]:
        """The body bytes in `data` (and what was left over from before)."""
        out: list[bytes] = []
        buf = self._buf
        buf += data
        pos = 0
        while not self.done:
            if self._state == 1:  # chunk data
                n = min(self._left, len(buf) - pos)
                if n <= 0:
                    break
                out.append(bytes(buf[pos : pos + n]))
                pos += n
                self._left -= n
                if self._left == 0:
                    self._state = 2
                continue
            end = buf.find(b"\r\n", pos)
            if end < 0:
                if len(buf) - pos > MAX_HEAD_BYTES:
                    raise UpstreamFailed("replica sent an over-long chunk line")
                break
            line = bytes(buf[pos:end])
            pos = end + 2
            self._line(line)
        del buf[:pos]
        if self.done and buf:
            self.extra = True
            buf.clear()
        return out

    def _line(self, line: bytes) -> None:
        if self._state == 0:  # a size line, maybe with extensions
            size = line.split(b";", 1)[0].strip()
            if not size or not _HEX.issuperset(size):
                raise UpstreamFailed(f"replica sent a bad chunk size: {line[:40]!r}")
            self._left = int(size, 16)
            self._state = 1 if self._left else 3
        elif self._state == 2:  # the CRLF after chunk data
            if line:
                raise UpstreamFailed("replica sent chunk data longer than its size")
            self._state = 0
        elif not line:  # trailers end with an empty line
            self.done = True
