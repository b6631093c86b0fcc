"""Request bodies under a byte cap: streamed reads, gzip/deflate decoding with a cap, bounded JSON.

aiohttp's server would decompress `Content-Encoding` bodies itself and apply `client_max_size`
only inside `Request.read()`; Thaw turns that off (`auto_decompress=False` on the runner) and
reads the raw stream here, so the one cap holds for the bytes on the wire (chunked or not) and
again for the decoded bytes, which stops zip bombs after `max_bytes` of output.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import AsyncIterable
from typing import Any

import numpy as np

from runtime import fast_json
from runtime.errors import InvalidInput, PayloadTooLarge

__all__ = ["decode_content", "parse_json", "read_capped"]

# Decode at most this many output bytes per zlib call, so memory grows only as output is kept.
_DECODE_STEP = 1 << 20

# A JSON string literal (escapes included); removed before counting brackets.
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def too_large(limit: int) -> PayloadTooLarge:
    """The one 413 error for any body that exceeds `limit` bytes."""
    return PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")


async def read_capped(
    stream: AsyncIterable[bytes], *, limit: int, declared_length: int | None
) -> bytes:
    """All bytes of `stream`; 413 as soon as the total passes `limit` (before it, if declared)."""
    if declared_length is not None and declared_length > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    total = 0
    async for chunk in stream:
        total += len(chunk)
        if total > limit:
            raise too_large(limit)
        chunks.append(chunk)
    if len(chunks) == 1:
        return chunks[0]
    return b"".join(chunks)


def decode_content(raw: bytes, encoding: str | None, *, limit: int) -> bytes:
    """Undo a `Content-Encoding` of gzip/deflate/identity, producing at most `limit` bytes."""
    coding = (encoding or "identity").strip().lower()
    if coding in ("", "identity"):
        return raw
    if coding in ("gzip", "x-gzip"):
        wbits = 16 + zlib.MAX_WBITS
    elif coding == "deflate":
        wbits = zlib.MAX_WBITS if _looks_like_zlib(raw) else -zlib.MAX_WBITS
    else:
        raise InvalidInput(f"unsupported Content-Encoding '{encoding}'; use gzip or deflate")
    return _inflate(raw, wbits, limit)


def _looks_like_zlib(raw: bytes) -> bool:
    """HTTP `deflate` should be zlib-wrapped, but some clients send a raw deflate stream."""
    return len(raw) >= 2 and raw[0] & 0x0F == 8 and ((raw[0] << 8) | raw[1]) % 31 == 0


def _inflate(raw: bytes, wbits: int, limit: int) -> bytes:
    """Decompress in bounded steps; 413 past `limit` output bytes, 400 on corrupt/truncated."""
    decoder = zlib.decompressobj(wbits)
    out: list[bytes] = []
    total = 0
    pending = raw
    try:
        while pending and not decoder.eof:
            piece = decoder.decompress(pending, min(_DECODE_STEP, limit - total + 1))
            total += len(piece)
            if total > limit:
                raise too_large(limit)
            out.append(piece)
            pending = decoder.unconsumed_tail
        piece = decoder.flush()
    except zlib.error as exc:
        raise InvalidInput(f"request body is not valid compressed data: {exc}") from None
    total += len(piece)
    if total > limit:
        raise too_large(limit)
    out.append(piece)
    if not decoder.eof:
        raise InvalidInput("compressed request body is truncated")
    if decoder.unused_data:
        raise InvalidInput("compressed request body has trailing bytes after its end")
    return b"".join(out)


def json_depth(text: bytes | memoryview) -> int:
    """Deepest bracket nesting of a JSON text, counting only brackets outside strings."""
    brackets = _JSON_STRING.sub(b"", bytes(text)).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    # '[' = 0x5B and '{' = 0x7B open; ']' = 0x5D and '}' = 0x7D close.
    steps = np.where((codes == 0x5B) | (codes == 0x7B), 1, -1)
    return int(np.cumsum(steps).max())


def parse_json(text: bytes | memoryview, *, max_depth: int, what: str = "request body") -> Any:
    """Parse JSON; InvalidInput (never RecursionError) for bad syntax or nesting over max_depth."""
    data = text if isinstance(text, bytes) else bytes(text)
    # Fast path: a text with no more opening brackets than the cap cannot nest deeper than it.
    if data.count(b"[") + data.count(b"{") > max_depth and json_depth(data) > max_depth:
        raise InvalidInput(f"{what} nests JSON deeper than {max_depth} levels")
    try:
        return fast_json.loads(data)
    except RecursionError:
        raise InvalidInput(f"{what} nests JSON deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None
