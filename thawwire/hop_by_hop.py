"""Hop-by-hop headers (RFC 9110 section 7.6.1): what no proxy of Thaw forwards, either way."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["HOP_BY_HOP", "connection_tokens"]

# RFC 9110 7.6.1 plus the legacy ones proxies still see; lowercase.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)


def connection_tokens(values: Iterable[str]) -> frozenset[str]:
    """The options of `Connection` header values, lowercase: `close`, `keep-alive`, and the
    names of further hop-by-hop headers of this message."""
    return frozenset(
        token for value in values for t in value.split(",") if (token := t.strip().lower())
    )
