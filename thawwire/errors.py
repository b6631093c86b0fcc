"""The errors this package raises: bytes from the other side that break a Thaw wire protocol,
and a client's shared-memory call that Triton would refuse.

    WireError       a handoff message or load report that is not the protocol (too long, not
                    JSON, a field missing, of the wrong type or out of range)
      PoolProtocolError  a fork-server frame that is not the protocol (thawwire.pool_protocol)
    LoadOverrideError    a repository load's `config` or `file:` override that cannot be
                         used (thawwire.load_overrides); both servers answer it 400
      LoadParameterError a load or unload gRPC parameter of the wrong kind or an unknown
                         name, answered in Triton's words without the load's prefix
    SharedMemoryError    a system shared-memory registration or tensor reference that cannot
                         be served (thawserver.shm_registry, thawwire.shm_params); `kind` is
                         Triton's error code for it, each server maps it to its own error

A `WireError` is a `ValueError`: callers that read from a peer treat it as one bad message, log
it and go on; nothing the peer sends can crash the reader.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ErrorKind",
    "LoadOverrideError",
    "LoadParameterError",
    "SharedMemoryError",
    "WireError",
]


class WireError(ValueError):
    """A message from a peer that does not follow the protocol; `message` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class LoadOverrideError(ValueError):
    """A load request's override that cannot be used; `message` says why (Triton's words)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class LoadParameterError(LoadOverrideError):
    """A load or unload request parameter of the wrong kind or name, refused before any load,
    in Triton's gRPC frontend's words (which, unlike a refused override's, name no model)."""


class ErrorKind(StrEnum):
    """Triton's error code of a shared-memory refusal (its gRPC status follows from it)."""

    INVALID_ARG = "INVALID_ARG"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    INTERNAL = "INTERNAL"


class SharedMemoryError(Exception):
    """A shared-memory call or reference refused in Triton's words; `kind` is its error code."""

    def __init__(self, message: str, kind: ErrorKind) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
