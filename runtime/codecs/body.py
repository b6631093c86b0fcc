"""Request bodies under a byte cap: streamed reads, gzip/deflate decoding with a cap, bounded JSON.

aiohttp's server would decompress `Content-Encoding` bodies itself and apply `client_max_size`
only inside `Request.read()`; Thaw turns that off (`auto_decompress=False` on the runner) and
reads the raw stream here, so the one cap holds for the bytes on the wire (chunked or not) and
again for the decoded bytes, which stops zip bombs after `max_bytes` of output.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import AsyncIterable
from typing import Any

import numpy as np

from runtime.errors import InvalidInput, JsonTooDeep, PayloadTooLarge, UnsupportedEncoding
from thawserver import fast_json
from thawserver.body_limit import CLIENT_FLAG, too_large_text

__all__ = ["decode_content", "json_depth", "parse_json", "read_capped", "too_deep", "too_large"]

# Decode at most this many output bytes per zlib call, so memory grows only as output is kept.
_DECODE_STEP = 1 << 20

# A JSON string literal (escapes included); emptied before counting brackets.
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)


def too_large(
    limit: int, *, size: int | None = None, what: str = "request", flag: str = CLIENT_FLAG
) -> PayloadTooLarge:
    """The one 413 error for any body over `limit` bytes, in Triton's words (its status is 400).

    `what` is "request JSON" for a JSON body, as Triton says; `size` when it is known; `flag`
    the setting that raises `limit` (`--max-internal-body-bytes` for the platform's own calls).
    """
    return PayloadTooLarge(too_large_text(limit, size=size, what=what, flag=flag))


async def read_capped(
    stream: AsyncIterable[bytes],
    *,
    limit: int,
    declared_length: int | None,
    what: str = "request",
    flag: str = CLIENT_FLAG,
) -> bytes:
    """All bytes of `stream`; 413 as soon as the total passes `limit` (before it, if declared)."""
    if declared_length is not None and declared_length > limit:
        raise too_large(limit, size=declared_length, what=what, flag=flag)
    chunks: list[bytes] = []
    total = 0
    async for chunk in stream:
        total += len(chunk)
        if total > limit:
            raise too_large(limit, what=what, flag=flag)
        chunks.append(chunk)
    if len(chunks) == 1:
        return chunks[0]
    return b"".join(chunks)


def decode_content(
    raw: bytes, encoding: str | None, *, limit: int, what: str = "request", flag: str = CLIENT_FLAG
) -> bytes:
    """Undo a `Content-Encoding` of gzip/deflate/identity, producing at most `limit` bytes."""
    coding = (encoding or "identity").strip().lower()
    if coding in ("", "identity"):
        return raw
    if coding in ("gzip", "x-gzip"):
        wbits = 16 + zlib.MAX_WBITS
    elif coding == "deflate":
        wbits = zlib.MAX_WBITS if _looks_like_zlib(raw) else -zlib.MAX_WBITS
    else:
        raise UnsupportedEncoding()
    return _inflate(raw, wbits, limit, f"decompressed {what}", flag)


def _looks_like_zlib(raw: bytes) -> bool:
    """HTTP `deflate` should be zlib-wrapped, but some clients send a raw deflate stream."""
    return len(raw) >= 2 and raw[0] & 0x0F == 8 and ((raw[0] << 8) | raw[1]) % 31 == 0


def _inflate(raw: bytes, wbits: int, limit: int, what: str, flag: str) -> bytes:
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
                raise too_large(limit, what=what, flag=flag)
            out.append(piece)
            pending = decoder.unconsumed_tail
        piece = decoder.flush()
    except zlib.error as exc:
        raise InvalidInput(f"request body is not valid compressed data: {exc}") from None
    total += len(piece)
    if total > limit:
        raise too_large(limit, what=what, flag=flag)
    out.append(piece)
    if not decoder.eof:
        raise InvalidInput("compressed request body is truncated")
    if decoder.unused_data:
        raise InvalidInput("compressed request body has trailing bytes after its end")
    return b"".join(out)


def _depths(text: bytes) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
    """The text with every string literal emptied to `""`; there, the offset of each bracket
    outside strings, its step (+1 opens, -1 closes) and the depth after it."""
    stripped = _JSON_STRING.sub(b'""', text)
    codes = np.frombuffer(stripped, dtype=np.uint8)
    # '[' = 0x5B and '{' = 0x7B open; ']' = 0x5D and '}' = 0x7D close.
    opens = (codes == 0x5B) | (codes == 0x7B)
    where = np.flatnonzero(opens | (codes == 0x5D) | (codes == 0x7D))
    steps = np.where(opens[where], 1, -1)
    return stripped, where, steps, np.cumsum(steps)


def json_depth(text: bytes | memoryview) -> int:
    """Deepest bracket nesting of a JSON text, counting only brackets outside strings."""
    _, _, _, depth = _depths(bytes(text))
    return int(depth.max()) if depth.size else 0


# Naming the member that nests too deep reads the strings before it: only when they are few.
_MAX_STRINGS_BEFORE_MEMBER = 1000


def too_deep(text: bytes, max_depth: int) -> JsonTooDeep | None:
    """JsonTooDeep if `text` nests deeper than `max_depth` (naming, when the text is an
    object, the top-level member whose value does), else None."""
    stripped, where, steps, depth = _depths(text)
    if not depth.size or depth.max() <= max_depth:
        return None
    return JsonTooDeep(max_depth, _deep_member(text, stripped, where, steps, depth, max_depth))


def _deep_member(
    text: bytes,
    stripped: bytes,
    where: np.ndarray,
    steps: np.ndarray,
    depth: np.ndarray,
    max_depth: int,
) -> str | None:
    """The key of the top-level member holding the first bracket past `max_depth`."""
    if max_depth < 2 or not stripped.lstrip().startswith(b"{"):
        return None
    first_deep = int(np.argmax(depth > max_depth))
    # The member's value is the last container opened at depth 1 before that bracket.
    opened_at_1 = np.flatnonzero(
        (depth[:first_deep] - steps[:first_deep] == 1) & (steps[:first_deep] == 1)
    )
    if not opened_at_1.size:
        return None
    head = stripped[: where[opened_at_1[-1]]].rstrip()
    if not head.endswith(b":") or not head[:-1].rstrip().endswith(b'""'):
        return None
    index = head.count(b'"') // 2 - 1  # the key is the last string before the value
    if index >= _MAX_STRINGS_BEFORE_MEMBER:
        return None
    key = next(itertools.islice(_JSON_STRING.finditer(text), index, None), None)
    if key is None:
        return None
    try:
        name = fast_json.loads(key[0])
    except ValueError:
        return None
    return name if isinstance(name, str) else None


def parse_json(text: bytes | memoryview, *, max_depth: int, what: str = "request body") -> Any:
    """Parse JSON; InvalidInput (never RecursionError) for bad syntax, JsonTooDeep for nesting
    over max_depth."""
    data = text if isinstance(text, bytes) else bytes(text)
    # Fast path: a text with no more opening brackets than the cap cannot nest deeper than it.
    if data.count(b"[") + data.count(b"{") > max_depth:
        error = too_deep(data, max_depth)
        if error is not None:
            raise error
    try:
        return fast_json.loads(data)
    except RecursionError:
        raise JsonTooDeep(max_depth, None) from None
    except ValueError as exc:
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None
