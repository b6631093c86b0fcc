"""Requests whose framing is ambiguous: each hides a second request (`smuggled`) where a
lenient parser would see one, and every Thaw server must answer it 400 and close.

`bad_framing(path, smuggled)` builds them for a target `path`; `read_answers` reads a raw
connection until the server closes it and splits out the status of every answer in it.
"""

from __future__ import annotations

import re
import socket

__all__ = [
    "bad_framing",
    "coded_request",
    "infer_request",
    "length_beside_chunked",
    "read_answers",
]


def infer_request(path: str, body: bytes, *, chunked: bool = False, close: bool = False) -> bytes:
    """A well-framed POST of `body` to `path` (Content-Length, or one chunk and the last)."""
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    if close:
        head += "Connection: close\r\n"
    if chunked:
        return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + (
            f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
        )
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def coded_request(path: str, body: bytes, codings: str) -> bytes:
    """A POST of `body` to `path` declared `Transfer-Encoding: <codings>, chunked`, sent as one
    chunk: well framed (chunked is last), in a coding the servers do not implement."""
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += f"Transfer-Encoding: {codings}, chunked\r\n\r\n"
    return head.encode() + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"


def length_beside_chunked(path: str, body: bytes) -> bytes:
    """What `requests` sends for a body its caller chunked by hand and declared
    `Transfer-Encoding: chunked`: a `Content-Length` of the chunked bytes beside it."""
    chunked = f"{len(body):X}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(chunked)}\r\n"
    return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunked


def bad_framing(path: str, smuggled: bytes) -> dict[str, bytes]:
    """Name -> raw bytes of a request to `path` that is ambiguous or malformed in its framing,
    with `smuggled` where some parser would take it for the next request."""
    start = f"POST {path} HTTP/1.1\r\nHost: x\r\n".encode()
    n = len(smuggled)
    last = b"0\r\n\r\n"
    return {
        # Content-Length says the smuggled request is body; chunked says it is the next one.
        "cl-and-te": start
        + f"Content-Length: {len(last) + n}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        + last
        + smuggled,
        "te-and-cl": start
        + b"Transfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n"
        + f"{n:x}\r\n".encode()
        + smuggled
        + b"\r\n"
        + last,
        "duplicate-content-length": start
        + f"Content-Length: 0\r\nContent-Length: {n}\r\n\r\n".encode()
        + smuggled,
        "conflicting-content-length-list": start
        + f"Content-Length: 0, {n}\r\n\r\n".encode()
        + smuggled,
        "obsolete-line-folding": start
        + f"Content-Length: {n}\r\nTransfer-Encoding: identity\r\n chunked\r\n\r\n".encode()
        + last
        + smuggled,
        "bare-lf-in-headers": start
        + f"X-Pad: a\nContent-Length: {n}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        + last
        + smuggled,
        "bare-lf-after-chunk-size": start
        + b"Transfer-Encoding: chunked\r\n\r\n0\n\r\n"
        + smuggled,
        "chunk-size-0x": start
        + f"Transfer-Encoding: chunked\r\n\r\n0x{n:x}\r\n".encode()
        + smuggled
        + b"\r\n"
        + last,
        "negative-chunk-size": start
        + f"Transfer-Encoding: chunked\r\n\r\n-{n:x}\r\n".encode()
        + smuggled
        + b"\r\n"
        + last,
        "overflowing-chunk-size": start
        + b"Transfer-Encoding: chunked\r\n\r\n1" + b"0" * 16 + f"{n:x}\r\n".encode()
        + smuggled
        + b"\r\n"
        + last,
        "chunk-extension-bare-lf": start
        + f"Transfer-Encoding: chunked\r\n\r\n{n:x};ext\n0\r\n\r\n".encode()
        + smuggled,
        "chunk-extension-control-char": start
        + b"Transfer-Encoding: chunked\r\n\r\n0;\x01\r\n\r\n"
        + smuggled,
        "chunk-data-without-crlf": start
        + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}XX"
        + last
        + smuggled,
        "transfer-encoding-not-chunked-last": start
        + f"Transfer-Encoding: chunked, identity\r\nContent-Length: {n}\r\n\r\n".encode()
        + smuggled,
    }  # fmt: skip


def read_answers(
    host: str, port: int, raw: bytes, *, within_s: float = 30
) -> tuple[list[str], bytes]:
    """Send `raw` on a fresh connection and read until the server closes it: the status of
    each answer, and all the bytes read. TimeoutError when the server keeps it open."""
    with socket.create_connection((host, port), timeout=within_s) as sock:
        sock.sendall(raw)
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
    return re.findall(r"HTTP/1\.[01] (\d{3}) ", data.decode("latin-1")), data
