"""The control channel between the server and a stub process, and how tensors cross it.

One `AF_UNIX` `SOCK_SEQPACKET` socket pair per stub: each send is one message, delivered whole
and in order, with any file descriptors it carries. A message is a JSON header (the op and its
fields) followed by the small tensors' bytes. A tensor over `INLINE_MAX_BYTES` never crosses
the socket: it is written once into its own memfd (shared memory), whose descriptor rides with
the message; the receiver maps it and reads the array in place (zero-copy; the mapping lives
as long as the array). Nothing is pickled. A message whose header and inline bytes would exceed
`MESSAGE_MAX_BYTES` is itself sent through a memfd.

    message := kind(1) ‖ json_length(u32 LE) ‖ json ‖ inline bytes        kind b"I"
             | kind(1)   and fd[0] holds the rest                          kind b"F"
    tensor  := {"name", "datatype", "shape", "at": [offset, length]}        inline
             | {"name", "datatype", "shape", "fd": k, "nbytes": n}          fd k of the message
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import socket
import struct
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime import triton_python_backend_utils as pb_utils

__all__ = [
    "INLINE_MAX_BYTES",
    "Channel",
    "ChannelClosed",
    "Message",
    "Tensor",
    "channel_pair",
    "v2_datatype",
]

# The v2 datatypes of numpy dtypes, little-endian on the wire. Kept here rather than imported
# from runtime.datatypes: a stub under another environment has no protobuf, which that
# module's package (thawwire) needs.
_V2 = {
    np.dtype(np.bool_): "BOOL", np.dtype(np.uint8): "UINT8", np.dtype(np.uint16): "UINT16",
    np.dtype(np.uint32): "UINT32", np.dtype(np.uint64): "UINT64", np.dtype(np.int8): "INT8",
    np.dtype(np.int16): "INT16", np.dtype(np.int32): "INT32", np.dtype(np.int64): "INT64",
    np.dtype(np.float16): "FP16", np.dtype(np.float32): "FP32", np.dtype(np.float64): "FP64",
}  # fmt: skip
_WIRE = {name: dtype.newbyteorder("<") for dtype, name in _V2.items()}
_WIRE["BF16"] = np.dtype("<u2")


def v2_datatype(dtype: np.dtype) -> str:
    """The v2 datatype of an array's dtype (str, bytes and objects: BYTES)."""
    found = _V2.get(np.dtype(dtype))
    if found is not None:
        return found
    if np.dtype(dtype).kind in ("O", "S", "U"):
        return "BYTES"
    raise ValueError(f"numpy dtype {dtype} has no v2 datatype")


def _deserialize_bytes(raw: memoryview, shape: tuple[int, ...]) -> np.ndarray:
    items = pb_utils.deserialize_bytes_tensor(raw)
    count = 1
    for dim in shape:
        count *= dim
    if items.size != count:
        raise ValueError(
            f"BYTES tensor holds {items.size} elements, shape {list(shape)} needs {count}"
        )
    return items.reshape(shape)


INLINE_MAX_BYTES = 64 * 1024
MESSAGE_MAX_BYTES = 160 * 1024  # under the kernel's default socket buffer (208 KiB)
_MAX_FDS = 250  # SCM_MAX_FD is 253
_LENGTH = struct.Struct("<I")


class ChannelClosed(Exception):
    """The other side of the channel is gone (exited, crashed, or closed it)."""


@dataclass(slots=True)
class Tensor:
    """A tensor on the wire's terms: v2 datatype, shape, and its array."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray


@dataclass(slots=True)
class Message:
    """One message: its JSON fields and its tensors (in the order they were added)."""

    fields: dict[str, Any]
    tensors: list[Tensor] = field(default_factory=list)


def _raw(tensor: Tensor) -> memoryview | bytes:
    if tensor.datatype == "BYTES":
        encoded = pb_utils.serialize_byte_tensor(np.asarray(tensor.data, dtype=np.object_))
        return b"" if encoded is None else encoded.tobytes()
    array = np.ascontiguousarray(tensor.data, dtype=_WIRE[tensor.datatype])
    return memoryview(array.reshape(-1).view(np.uint8).data)


def _memfd_with(data: memoryview | bytes, label: str) -> int:
    fd = os.memfd_create(label, os.MFD_CLOEXEC)
    try:
        size = len(data)
        os.ftruncate(fd, size)
        if size:
            with mmap.mmap(fd, size) as mapped:
                mapped[:] = data
    except BaseException:
        os.close(fd)
        raise
    return fd


def _map(fd: int, nbytes: int) -> memoryview:
    """A writable mapping of a memfd (the descriptor is closed: the mapping keeps the memory)."""
    try:
        if nbytes == 0:
            return memoryview(bytearray())
        return memoryview(mmap.mmap(fd, nbytes))
    finally:
        os.close(fd)


def _array(datatype: str, shape: tuple[int, ...], raw: memoryview) -> np.ndarray:
    if datatype == "BYTES":
        return _deserialize_bytes(raw, shape)
    return np.frombuffer(raw, dtype=_WIRE[datatype]).reshape(shape)


class Channel:
    """One end of the control channel; `send` is thread-safe, `recv` belongs to one reader."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._send_lock = threading.Lock()

    def fileno(self) -> int:
        return self._sock.fileno()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    def send(self, message: Message) -> None:
        """Send one message (large tensors through memfds); ChannelClosed if the peer is gone."""
        descriptors: list[int] = []
        try:
            specs, inline = [], bytearray()
            for tensor in message.tensors:
                raw = _raw(tensor)
                spec: dict[str, Any] = {
                    "name": tensor.name,
                    "datatype": tensor.datatype,
                    "shape": list(tensor.shape),
                }
                if len(raw) <= INLINE_MAX_BYTES and len(inline) + len(raw) <= INLINE_MAX_BYTES:
                    spec["at"] = [len(inline), len(raw)]
                    inline += raw
                else:
                    spec["fd"], spec["nbytes"] = len(descriptors), len(raw)
                    descriptors.append(_memfd_with(raw, "thaw-tensor"))
                specs.append(spec)
            if len(descriptors) > _MAX_FDS:
                raise ValueError(f"a message can carry at most {_MAX_FDS} large tensors")
            header = json.dumps({**message.fields, "tensors": specs}).encode()
            body = _LENGTH.pack(len(header)) + header + bytes(inline)
            if len(body) + 1 > MESSAGE_MAX_BYTES:
                descriptors.insert(0, _memfd_with(body, "thaw-message"))
                payload = b"F" + _LENGTH.pack(len(body))
            else:
                payload = b"I" + body
            with self._send_lock:
                try:
                    if descriptors:
                        socket.send_fds(self._sock, [payload], descriptors)
                    else:
                        self._sock.sendall(payload)
                except (BrokenPipeError, ConnectionResetError, OSError) as exc:
                    raise ChannelClosed(str(exc)) from exc
        finally:
            for fd in descriptors:
                os.close(fd)

    def recv(self) -> Message:
        """The next message (blocking); ChannelClosed at the end of the stream."""
        try:
            payload, fds, _flags, _addr = socket.recv_fds(
                self._sock, MESSAGE_MAX_BYTES, _MAX_FDS + 1
            )
        except (ConnectionResetError, OSError) as exc:
            raise ChannelClosed(str(exc)) from exc
        if not payload:
            for fd in fds:
                os.close(fd)
            raise ChannelClosed("end of stream")
        try:
            return self._parse(payload, list(fds))
        except BaseException:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            raise

    @staticmethod
    def _parse(payload: bytes, fds: list[int]) -> Message:
        kind = payload[:1]
        if kind == b"F":
            (size,) = _LENGTH.unpack_from(payload, 1)
            body: memoryview = _map(fds.pop(0), size)
        elif kind == b"I":
            body = memoryview(payload)[1:]
        else:
            raise ValueError(f"unknown message kind {kind!r}")
        (length,) = _LENGTH.unpack_from(body, 0)
        header = json.loads(bytes(body[4 : 4 + length]))
        inline = body[4 + length :]
        tensors = []
        for spec in header.pop("tensors", []):
            shape = tuple(int(d) for d in spec["shape"])
            if "at" in spec:
                offset, size = spec["at"]
                raw = inline[offset : offset + size]
            else:
                raw = _map(fds[spec["fd"]], int(spec["nbytes"]))
                fds[spec["fd"]] = -1
            tensors.append(
                Tensor(spec["name"], spec["datatype"], shape, _array(spec["datatype"], shape, raw))
            )
        for fd in fds:
            if fd >= 0:
                os.close(fd)
        return Message(header, tensors)


def channel_pair() -> tuple[socket.socket, socket.socket]:
    """A connected (server, stub) socket pair; the stub's end is inheritable."""
    server, stub = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stub.set_inheritable(True)
    return server, stub
