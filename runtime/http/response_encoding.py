"""Response compression: pick gzip or deflate from `Accept-Encoding` and compress a body."""

from __future__ import annotations

import zlib

__all__ = ["MIN_COMPRESS_BYTES", "compress_body", "pick_encoding"]

# Fast compression: infer responses are latency-bound, and level 1 already shrinks tensors well.
_LEVEL = 1
# Smaller bodies go out as they are, whatever the client accepts (HTTP allows it): setting up a
# zlib stream costs ~50 µs here, more than a small request's whole serving, to save a few
# hundred bytes. aiohttp, requests and httpx clients send `Accept-Encoding: gzip` by default.
MIN_COMPRESS_BYTES = 1024


def pick_encoding(accept_encoding: str) -> str | None:
    """The first of gzip/deflate the client accepts (q > 0), or None for an identity body."""
    for part in accept_encoding.split(","):
        coding, _, params = part.strip().partition(";")
        coding = coding.strip().lower()
        if coding not in ("gzip", "deflate"):
            continue
        quality = params.strip().lower()
        if quality.startswith("q="):
            try:
                if float(quality[2:]) <= 0:
                    continue
            except ValueError:
                continue
        return coding
    return None


def compress_body(body: bytes, coding: str) -> bytes:
    """`body` as a gzip member or a zlib-wrapped deflate stream (what HTTP `deflate` means)."""
    wbits = 16 + zlib.MAX_WBITS if coding == "gzip" else zlib.MAX_WBITS
    compressor = zlib.compressobj(_LEVEL, zlib.DEFLATED, wbits)
    return compressor.compress(body) + compressor.flush()
