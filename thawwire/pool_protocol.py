"""The fork server's control protocol: `thaw up` asks a `thaw serve` zygote to fork pool processes.

One stream socket (a socketpair end the zygote inherits as `thaw serve --fork-server-fd FD`)
carries frames both ways: a 4-byte big-endian length, then that many bytes of a UTF-8 JSON
object with an `op`. A `fork` request travels in one `sendmsg` together with two file
descriptors (SCM_RIGHTS): the write ends of the child's stdout and stderr pipes.

    zygote -> activator   {"op": "ready", "pid", "threads", "preloaded", "deferred", "import_s"}
    activator -> zygote   {"op": "fork", "id", "argv"}            + 2 fds: stdout, stderr
    zygote -> activator   {"op": "forked", "id", "pid"} | {"op": "error", "id", "error"}
    activator -> zygote   {"op": "status", "id"}
    zygote -> activator   {"op": "status", "id", "pid", "threads", "children"}
    zygote -> activator   {"op": "exited", "pid", "status"}       (a child it reaped)

`argv` is a `thaw serve` command line without the command (`[REPO, "--port", "0", ...]`);
`status` is a subprocess-style return code (negative: killed by that signal). The zygote
stops when the activator's end closes. Both ends decode with `FrameDecoder`, which refuses
frames over `MAX_FRAME_BYTES` and anything that is not a JSON object with a known `op`.
"""

from __future__ import annotations

import json
import struct
from enum import StrEnum
from typing import Any

from thawwire.errors import WireError

__all__ = [
    "FDS_PER_FORK",
    "MAX_FRAME_BYTES",
    "FrameDecoder",
    "Op",
    "PoolProtocolError",
    "encode_frame",
]

MAX_FRAME_BYTES = 1 << 20  # a fork request's argv is a few hundred bytes
FDS_PER_FORK = 2  # the child's stdout and stderr
_HEADER = struct.Struct(">I")


class PoolProtocolError(WireError):
    """A frame that breaks the protocol (too large, not JSON, unknown op, missing field)."""


class Op(StrEnum):
    """The kinds of frame."""

    READY = "ready"  # the zygote imported its frameworks and forks from now on
    FORK = "fork"  # fork one `thaw serve` child with this argv
    FORKED = "forked"  # the child of request `id` runs as `pid`
    ERROR = "error"  # request `id` failed: `error` says why
    STATUS = "status"  # a question (activator) or its answer (zygote)
    EXITED = "exited"  # a child ended; the zygote reaped it


# The fields each frame must carry, with their JSON types (int excludes bool).
_FIELDS: dict[Op, dict[str, type]] = {
    Op.READY: {"pid": int, "threads": int, "preloaded": list, "deferred": list, "import_s": float},
    Op.FORK: {"id": int, "argv": list},
    Op.FORKED: {"id": int, "pid": int},
    Op.ERROR: {"id": int, "error": str},
    Op.STATUS: {"id": int},
    Op.EXITED: {"pid": int, "status": int},
}


def encode_frame(op: Op, **fields: Any) -> bytes:
    """One frame: `op` and `fields`, checked against the op's required fields."""
    message = {"op": op.value, **fields}
    _check(message)
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME_BYTES:
        raise PoolProtocolError(f"frame of {len(body)} bytes, must be <= {MAX_FRAME_BYTES}")
    return _HEADER.pack(len(body)) + body


class FrameDecoder:
    """Bytes in (any split), whole checked messages out."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The messages `data` completes, in order; PoolProtocolError on a bad frame."""
        self._buffer += data
        out = []
        while len(self._buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buffer)
            if size > MAX_FRAME_BYTES:
                raise PoolProtocolError(f"frame of {size} bytes, must be <= {MAX_FRAME_BYTES}")
            if len(self._buffer) < _HEADER.size + size:
                break
            body = bytes(self._buffer[_HEADER.size : _HEADER.size + size])
            del self._buffer[: _HEADER.size + size]
            try:
                message = json.loads(body)
            except ValueError as exc:
                raise PoolProtocolError(f"frame is not JSON: {exc}") from None
            _check(message)
            out.append(message)
        return out


def _check(message: object) -> None:
    if not isinstance(message, dict):
        raise PoolProtocolError("frame must be a JSON object")
    try:
        op = Op(str(message.get("op")))
    except ValueError:
        raise PoolProtocolError(f"unknown op {str(message.get('op'))[:40]!r}") from None
    for name, kind in _FIELDS[op].items():
        value = message.get(name)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            raise PoolProtocolError(f"'{op}' frame: '{name}' must be {kind.__name__}")
    if op is Op.FORK and not all(isinstance(a, str) for a in message["argv"]):
        raise PoolProtocolError("'fork' frame: every argv item must be a string")
