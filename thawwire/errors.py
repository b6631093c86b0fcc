"""The one error this package raises: bytes from the other side that break a Thaw wire protocol.

    WireError       a handoff message or load report that is not the protocol (too long, not
                    JSON, a field missing, of the wrong type or out of range)
      PoolProtocolError  a fork-server frame that is not the protocol (thawwire.pool_protocol)

It is a `ValueError`: callers that read from a peer treat it as one bad message, log it and
go on; nothing the peer sends can crash the reader.
"""

from __future__ import annotations

__all__ = ["WireError"]


class WireError(ValueError):
    """A message from a peer that does not follow the protocol; `message` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
