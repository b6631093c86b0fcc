"""A request whose `Content-Length` and `Transfer-Encoding: chunked` agree on where it ends,
taken as chunked and its connection closed after it, the way Triton takes it.

aiohttp's parser refuses every head with both (400), as request smuggling hides behind them: a
length-framing proxy and a chunk-framing server disagree on where the request ends, and what
one takes for body the other takes for the next request. But plain clients send both where they
agree: Python's `requests` adds a `Content-Length` of the chunked bytes to a body whose caller
chunked it by hand and said `Transfer-Encoding: chunked`, and Triton answers that (its own
L0_http `test_content_encoding_chunked_manually`). So `prefer_chunked` takes such a request
only when both framings end it at the same byte, with nothing after it in the bytes at hand;
any disagreement or bytes after it are left to the parser, which answers 400 and closes (the
smuggling cases of docs/hardening.md stay refused). A head and body that arrive in separate
reads are held until the body is all here (`awaits_more`; the head deadline bounds the wait).

The rewrite happens before the parser reads the head: the `Content-Length` line becomes
`Connection: close`, padded with whitespace to the same length, so no byte moves (RFC 9112
§6.3: "the Transfer-Encoding overrides the Content-Length"). The connection closes after the
answer, so nothing later on it is read as a request.

Only a head the parser would otherwise take is rewritten: a whole HTTP/1.1 head at the start of
`data`, CRLF line ends, no obsolete folding, exactly one `Content-Length` of digits, `chunked`
the only transfer coding, and plain chunks (hex sizes, no extensions, no trailers).
"""

from __future__ import annotations

import re

__all__ = ["MAX_HEAD_BYTES", "MAX_HELD_BODY_BYTES", "awaits_more", "prefer_chunked", "settle"]

MAX_HEAD_BYTES = 16 * 1024  # a longer head is never rewritten (the parser judges it)
# A candidate's body is held until all here up to this size; a longer one is the parser's (400).
MAX_HELD_BODY_BYTES = 1 << 20
_REQUEST_LINE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [^ \r\n]+ HTTP/1\.1")
_CONTENT_LENGTH = re.compile(rb"(?i)content-length:[ \t]*[0-9]+[ \t]*")
_CLOSE = b"Connection:"
_CLOSE_VALUE = b"close"


def prefer_chunked(data: bytes) -> bytes | None:
    """`data` (bytes starting at a request's head) with a `Content-Length` beside chunked
    turned into `Connection: close` of the same length; None when there is nothing to rewrite
    (the common case, decided in two substring searches) or the head is not one to rewrite."""
    found = _candidate(data)
    if found is None:
        return None
    end, request_line, lines, at, declared = found
    if _chunked_length(data, end + 4) != declared or end + 4 + declared != len(data):
        return None  # the framings disagree, or the body is not all here, or more follows
    old = lines[at]
    lines[at] = _CLOSE + b" " * (len(old) - len(_CLOSE) - len(_CLOSE_VALUE)) + _CLOSE_VALUE
    rewritten = b"\r\n".join([request_line, *lines])
    assert len(rewritten) == end
    return rewritten + data[end:]


def awaits_more(data: bytes) -> bool:
    """Whether `data` (a request's first bytes) may still become a request `prefer_chunked`
    rewrites once more bytes arrive: a head not yet whole (shorter than MAX_HEAD_BYTES), or a
    whole candidate head (one `Content-Length` beside chunked, declaring at most
    MAX_HELD_BODY_BYTES) whose body is not all here.

    A head and its body may arrive in separate reads (a client that writes them apart, TCP
    segments of a loaded machine), so one read alone cannot tell; the caller holds the bytes
    until this is False, and the connection's head deadline bounds the wait."""
    end = data.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
    if end < 0:
        return len(data) < MAX_HEAD_BYTES
    found = _candidate(data)
    if found is None:
        return False
    end, _, _, _, declared = found
    return declared <= MAX_HELD_BODY_BYTES and len(data) < end + 4 + declared


def settle(data: bytes) -> bytes | None:
    """A request's first bytes as the parser should get them: `prefer_chunked`'s rewrite, or
    `data` as it is; None while `awaits_more(data)`. The usual request, which names no
    transfer coding, costs two substring searches and a search for the head's end."""
    if b"ransfer-" not in data and b"RANSFER-" not in data:  # as _candidate: nothing to rewrite
        whole = data.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES) >= 0
        return data if whole or len(data) >= MAX_HEAD_BYTES else None
    if awaits_more(data):
        return None
    return prefer_chunked(data) or data


def _candidate(data: bytes) -> tuple[int, bytes, list[bytes], int, int] | None:
    """A whole head with exactly one plain `Content-Length` and `chunked` its only coding:
    (where the head ends, its request line, its header lines, the length line's index, the
    declared length); None for anything else (the parser's to judge)."""
    if b"ransfer-" not in data and b"RANSFER-" not in data:
        return None
    end = data.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
    if end < 0:
        return None
    head = data[:end]
    if b"\n" in head.replace(b"\r\n", b"") or b"\r" in head.replace(b"\r\n", b""):
        return None  # a bare LF or CR: the parser's to refuse
    request_line, *lines = head.split(b"\r\n")
    if _REQUEST_LINE.fullmatch(request_line) is None:
        return None
    lengths: list[int] = []
    codings: list[bytes] = []
    for index, line in enumerate(lines):
        if line[:1] in (b" ", b"\t"):
            return None  # obsolete line folding
        name, colon, value = line.partition(b":")
        if not colon:
            return None
        lowered = name.lower()
        if lowered == b"content-length":
            if _CONTENT_LENGTH.fullmatch(line) is None:
                return None
            lengths.append(index)
        elif lowered == b"transfer-encoding":
            codings += [c.strip().lower() for c in value.split(b",") if c.strip()]
    if len(lengths) != 1 or codings != [b"chunked"]:
        return None
    declared = int(lines[lengths[0]].partition(b":")[2].strip())
    return end, request_line, lines, lengths[0], declared


_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,8}\r\n")


def _chunked_length(data: bytes, start: int) -> int | None:
    """How many bytes from `start` a plain chunked body takes (its last chunk and the empty
    trailer section included); None when `data` does not hold one, plain, from `start`."""
    at = start
    while True:
        size_line = _CHUNK_SIZE.match(data, at)
        if size_line is None:
            return None
        size = int(size_line.group()[:-2], 16)
        at = size_line.end() + size
        if data[at : at + 2] != b"\r\n":
            return None
        at += 2
        if size == 0:
            return at - start
