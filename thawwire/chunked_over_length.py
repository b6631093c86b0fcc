"""A request head with both `Content-Length` and `Transfer-Encoding: chunked`, taken as chunked
and its connection closed after it, the way nginx and Triton take it.

aiohttp's parser refuses such a head (400), as request smuggling might hide behind it. But
plain clients send it too: Python's `requests` adds a `Content-Length` to a body whose caller
set `Transfer-Encoding: chunked` and chunked it by hand, and Triton answers that (its own
L0_http `test_content_encoding_chunked_manually`). RFC 9112 §6.3: "the Transfer-Encoding
overrides the Content-Length"; a server that goes on must use chunked. So `prefer_chunked`
rewrites the head before the parser reads it: the `Content-Length` line becomes
`Connection: close`, padded with whitespace to the same length, so no byte after it moves.
The body is framed by chunked alone, and nothing after it on the connection is ever served: the
parser refuses data after `Connection: close`, so a request hidden where a length-framing proxy
saw body never runs.

Only a head the parser would otherwise take is rewritten: a whole HTTP/1.1 head at the start of
`data`, CRLF line ends, no obsolete folding, exactly one `Content-Length` of digits, and
`chunked` the last transfer coding. Everything else is left for the parser to judge.
"""

from __future__ import annotations

import re

__all__ = ["MAX_HEAD_BYTES", "prefer_chunked"]

MAX_HEAD_BYTES = 16 * 1024  # a longer head is never rewritten (the parser judges it)
_REQUEST_LINE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [^ \r\n]+ HTTP/1\.1")
_CONTENT_LENGTH = re.compile(rb"(?i)content-length:[ \t]*[0-9]+[ \t]*")
_CLOSE = b"Connection:"
_CLOSE_VALUE = b"close"


def prefer_chunked(data: bytes) -> bytes | None:
    """`data` (bytes starting at a request's head) with a `Content-Length` beside chunked
    turned into `Connection: close` of the same length; None when there is nothing to rewrite
    (the common case, decided in two substring searches) or the head is not one to rewrite."""
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
    if len(lengths) != 1 or not codings or codings[-1] != b"chunked":
        return None
    old = lines[lengths[0]]
    lines[lengths[0]] = _CLOSE + b" " * (len(old) - len(_CLOSE) - len(_CLOSE_VALUE)) + _CLOSE_VALUE
    rewritten = b"\r\n".join([request_line, *lines])
    assert len(rewritten) == end
    return rewritten + data[end:]
