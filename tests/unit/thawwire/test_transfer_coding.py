from __future__ import annotations

import pytest

from thawserver.transfer_coding import unsupported_codings


@pytest.mark.parametrize(
    ("header", "unknown"),
    [
        ("chunked", []),
        ("Chunked", []),
        (" chunked ", []),
        (",chunked,", []),
        ("gzip, chunked", ["gzip"]),
        ("GZIP ,deflate, chunked", ["gzip", "deflate"]),
        ("x-custom;q=1, chunked", ["x-custom"]),
        ("identity", ["identity"]),
    ],
)
def test_only_chunked_is_implemented(header: str, unknown: list[str]) -> None:
    assert unsupported_codings(header) == unknown
