"""The one text of a request body over the server's limit (413), for both servers: what was
too big, its size when known, the limit, and the flag that raises it (`--max-body-bytes`, on
`thaw serve` and `thaw up` alike). Triton's words ("... exceeds the maximum allowed input
size"); its status for it is 400, Thaw's 413.

    too_large_text(1 << 20, size=5 << 20)
      -> "request size of 5242880 bytes exceeds the maximum allowed input size of 1048576
          bytes. Use --max-body-bytes to increase the limit."
"""

from __future__ import annotations

from thawwire.internal_calls import InternalCalls

__all__ = ["CLIENT_FLAG", "INTERNAL_FLAG", "body_cap", "too_large_text"]

CLIENT_FLAG = "--max-body-bytes"
# The cap of the platform's own calls, BLS and ensemble steps (thawwire.internal_calls).
INTERNAL_FLAG = "--max-internal-body-bytes"


def too_large_text(
    limit: int, *, size: int | None = None, what: str = "request", flag: str = CLIENT_FLAG
) -> str:
    """`what` ("request", or "request JSON" for a JSON body, as Triton says) over `limit`;
    `flag` raises it (`--max-internal-body-bytes` for the platform's own calls)."""
    of = f" of {size} bytes" if size is not None else ""
    return (
        f"{what} size{of} exceeds the maximum allowed input size of {limit} bytes. "
        f"Use {flag} to increase the limit."
    )


def body_cap(calls: InternalCalls | None, token: str | None, *, public: int) -> tuple[int, str]:
    """(the cap, the flag that raises it) of a request whose `Thaw-Internal-Token` is `token`:
    the platform's own call gets the internal cap (never below `public`), any other request
    `public` and `--max-body-bytes` (thawwire.internal_calls; `calls` None: no token here)."""
    if calls is not None and calls.is_internal(token):
        return max(public, calls.max_body_bytes), INTERNAL_FLAG
    return public, CLIENT_FLAG
