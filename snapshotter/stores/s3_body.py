"""Read an S3 GET body straight into caller memory: socket -> destination, no staging bytes.

botocore's `StreamingBody.readinto` goes through urllib3's `HTTPResponse.readinto`, which
reads into a fresh `bytes` and copies that into the destination: one allocation and one extra
memcpy per piece. Underneath it, the standard library's `http.client.HTTPResponse.readinto`
(what urllib3 wraps as `_fp`) reads a plain, length-delimited body with `recv_into` directly
into the destination, releasing the GIL while the kernel copies. This module uses that when
the response is such a body, and the public `readinto` otherwise (chunked or content-encoded
responses, or a botocore/urllib3 whose internals look different).

Errors are raised as the botocore exceptions the public path raises for the same faults
(`ReadTimeoutError`, `ResponseStreamingError`, `IncompleteReadError`), so callers retry and
translate them exactly as before. After a complete body the connection goes back to urllib3's
pool, as urllib3 itself does; after an error it is closed.
"""

from __future__ import annotations

import http.client
from collections.abc import Callable
from typing import Any

OnRead = Callable[[int], None]
"""Called with the number of bytes just stored, after each read (the body's progress)."""


def direct_stream(body: Any, nbytes: int) -> http.client.HTTPResponse | None:
    """The standard-library response under botocore's `body` when it is a plain body of
    exactly `nbytes` bytes still unread; None when the direct path does not apply. Only a
    plain `StreamingBody`: a subclass (botocore's checksum-validating body) must see every
    byte itself."""
    from botocore.response import StreamingBody

    if type(body) is not StreamingBody:
        return None
    raw = getattr(body, "_raw_stream", None)
    fp = getattr(raw, "_fp", None)
    if not isinstance(fp, http.client.HTTPResponse) or fp.chunked or fp.length != nbytes:
        return None
    headers = getattr(raw, "headers", None)
    if headers is None or headers.get("content-encoding", "identity") != "identity":
        return None
    if not callable(getattr(raw, "release_conn", None)):
        return None
    return fp


def read_body_into(
    body: Any, view: memoryview, *, piece_bytes: int, on_read: OnRead | None = None
) -> None:
    """Fill `view` (exactly the body's length) from botocore's streaming `body`. On an error
    the bytes `on_read` was told about are in place (a retry can resume after them)."""
    fp = direct_stream(body, len(view))
    if fp is None:
        _read_public(body, view, piece_bytes, on_read)
    else:
        _read_direct(body._raw_stream, fp, view, on_read)


def _read_public(body: Any, view: memoryview, piece_bytes: int, on_read: OnRead | None) -> None:
    from botocore.exceptions import IncompleteReadError

    got, want = 0, len(view)
    while got < want:
        n = body.readinto(view[got : got + piece_bytes])
        if not n:
            raise IncompleteReadError(actual_bytes=got, expected_bytes=want)
        got += n
        if on_read is not None:
            on_read(n)


def _read_direct(
    raw: Any, fp: http.client.HTTPResponse, view: memoryview, on_read: OnRead | None
) -> None:
    from botocore.exceptions import (
        IncompleteReadError,
        ReadTimeoutError,
        ResponseStreamingError,
    )

    got, want = 0, len(view)
    try:
        while got < want:
            n = fp.readinto(view[got:])
            if not n:
                raise IncompleteReadError(actual_bytes=got, expected_bytes=want)
            got += n
            if on_read is not None:
                on_read(n)
    except TimeoutError as exc:  # socket.timeout: the read timeout botocore configured
        raw.close()
        raise ReadTimeoutError(endpoint_url=str(raw.url or ""), error=exc) from exc
    except (OSError, http.client.HTTPException) as exc:  # reset, broken pipe, bad framing
        raw.close()
        raise ResponseStreamingError(error=exc) from exc
    except BaseException:
        raw.close()
        raise
    if fp.isclosed():  # every byte read: the connection is reusable
        raw.release_conn()
