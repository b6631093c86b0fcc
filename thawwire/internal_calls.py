"""The platform's own calls back through its front door, told apart from a client's.

Under `thaw up` a replica's Python model calls other models by BLS, and an ensemble's steps
run on other replicas: both are requests from a replica to the front door, and the front door
sends them on to the called model's replica. A client's body is capped (`--max-body-bytes`,
64 MiB by default) so that no client can make a server buffer gigabytes; a BLS call carries
what the deployment's own model code computed, as large as Triton's in-process BLS would take
it (L0_backend_python/bls sends a 1 GiB tensor). So the deployment shares one secret: a
random token, made by `thaw up` at each start (or, on Kubernetes, kept in a Secret), written
to a 0600 file each replica is given (`--internal-token-file`). A request that carries it in
`Thaw-Internal-Token` is the platform's own and is capped at `--max-internal-body-bytes`
(4 GiB by default) instead, by the front door and by the replica that serves it; any other
value, or none, is a client's and keeps the client's cap. The token is compared in constant
time, never logged, never shown by `repr`, and never becomes a request parameter (a header
forward pattern skips it).

    calls = InternalCalls(read_token(path), max_body_bytes=4 << 30)
    calls.is_internal(request.headers.get(HEADER))  # True: capped at 4 GiB (body_limit.body_cap)
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "HEADER",
    "InternalCalls",
    "TokenError",
    "new_token",
    "read_token",
    "write_token",
]

HEADER = "Thaw-Internal-Token"
DEFAULT_MAX_BODY_BYTES = 4 << 30
# 32 random bytes, URL-safe base64: 43 characters. A file holding more is not a token.
_TOKEN_BYTES = 32
_MAX_FILE_BYTES = 4096
_MIN_TOKEN_CHARS = 32


class TokenError(ValueError):
    """The token file cannot be read, or what it holds is not a token (a clear message)."""


def new_token() -> str:
    """A fresh random token (256 bits)."""
    return secrets.token_urlsafe(_TOKEN_BYTES)


def write_token(path: Path, token: str) -> None:
    """Write `token` to a new file at `path`, created 0600 (only this user reads it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as file:
        file.write(token)


def read_token(path: Path) -> str:
    """The token in the file at `path` (surrounding whitespace dropped, as a mounted Secret
    may end in a newline). TokenError when it cannot be read or is no token: at least 32
    printable ASCII characters without spaces."""
    try:
        with open(path, "rb") as file:
            raw = file.read(_MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise TokenError(
            f"cannot read the internal token file {str(path)!r}: {exc.strerror or exc}"
        ) from None
    if len(raw) > _MAX_FILE_BYTES:
        raise TokenError(f"the internal token file {str(path)!r} is over {_MAX_FILE_BYTES} bytes")
    token = raw.strip()
    if len(token) < _MIN_TOKEN_CHARS or not all(0x21 <= byte <= 0x7E for byte in token):
        raise TokenError(
            f"the internal token file {str(path)!r} holds no token: it must be at least "
            f"{_MIN_TOKEN_CHARS} printable ASCII characters without spaces"
        )
    return token.decode("ascii")


@dataclass(frozen=True)
class InternalCalls:
    """The deployment's token and the body cap of the requests that carry it."""

    token: str
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    def __repr__(self) -> str:  # the token is a secret: never in a log line or a traceback
        return f"InternalCalls(token=<hidden>, max_body_bytes={self.max_body_bytes})"

    def is_internal(self, value: str | None) -> bool:
        """Whether a request's `Thaw-Internal-Token` value is this deployment's token."""
        if value is None:
            return False
        return hmac.compare_digest(value.encode("utf-8", "replace"), self.token.encode())
