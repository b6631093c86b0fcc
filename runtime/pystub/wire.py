"""The control channel between the server and a stub process, and how tensors cross it.

One `AF_UNIX` `SOCK_SEQPACKET` socket pair per stub: each send is one message, delivered whole
and in order, with any file descriptors it carries. A message is a JSON header (the op and its
fields), a packed table of its tensors, then the small tensors' bytes. A tensor that would take
the inline bytes past `INLINE_MAX_BYTES` never crosses the socket: it is written once into its
own memfd (shared memory), whose descriptor rides with the message; the receiver maps it and
reads the array in place (zero-copy; the mapping lives as long as the array). Nothing is
pickled. A message whose header and inline bytes would exceed `MESSAGE_MAX_BYTES` is itself
sent through a memfd.

    message := kind(1) ‖ json_length(u32 LE) ‖ json ‖ table ‖ inline bytes   kind b"I"
             | kind(1)   and fd[0] holds the rest                            kind b"F"
             | kind(1) ‖ (length(u32 LE) ‖ message of kind b"I")*            kind b"B"
    table   := count(u16 LE) ‖ tensor*
    tensor  := datatype(u8) ‖ ndim(u8) ‖ in_fd(u8) ‖ name_length(u16) ‖ name ‖ dims(i64 * ndim)
               ‖ at(u64: the inline offset, or the index of its fd) ‖ nbytes(u64)

The table is packed, not JSON: a tiny model's messages are mostly tensor descriptions, and
struct packs them several times faster than json.

A bundle (kind b"B") carries several small messages that were ready at once in one datagram:
one send and one wake-up of the reader for all of them (the executes the server sends in one
turn of its loop). Messages with descriptors are never bundled; order is kept. A stub sends
each answer at once, never held for company: if its next execute kills the process, the
answers before it must already be with the server.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import socket
import struct
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime import fast_json  # stdlib json, or orjson where the environment has it
from runtime import triton_python_backend_utils as pb_utils

__all__ = [
    "INLINE_MAX_BYTES",
    "Channel",
    "ChannelClosed",
    "Encoded",
    "Message",
    "Tensor",
    "bundle",
    "bundleable",
    "channel_pair",
    "decode",
    "decode_all",
    "encode",
    "receive",
    "transmit",
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
_COUNT = struct.Struct("<H")
_TENSOR = struct.Struct("<BBBH")  # datatype, ndim, in_fd, name length
_PLACE = struct.Struct("<QQ")  # at, nbytes
_DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
              "FP16", "FP32", "FP64", "BF16", "BYTES")  # fmt: skip
_DATATYPE_CODES = {name: code for code, name in enumerate(_DATATYPES)}


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


@dataclass(slots=True)
class Encoded:
    """A message ready to send: its bytes and the descriptors it carries (owned: `close` them
    once sent)."""

    payload: bytes
    fds: list[int]

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []


def encode(message: Message) -> Encoded:
    """A message as one datagram (large tensors written into memfds)."""
    descriptors: list[int] = []
    try:
        table = [_COUNT.pack(len(message.tensors))]
        inline = bytearray()
        for tensor in message.tensors:
            raw = _raw(tensor)
            name = tensor.name.encode()
            in_fd = not (len(inline) + len(raw) <= INLINE_MAX_BYTES)
            table += [
                _TENSOR.pack(_DATATYPE_CODES[tensor.datatype], len(tensor.shape), in_fd, len(name)),
                name,
                struct.pack(f"<{len(tensor.shape)}q", *tensor.shape),
                _PLACE.pack(len(descriptors) if in_fd else len(inline), len(raw)),
            ]
            if in_fd:
                descriptors.append(_memfd_with(raw, "thaw-tensor"))
            else:
                inline += raw
        if len(descriptors) > _MAX_FDS:
            raise ValueError(f"a message can carry at most {_MAX_FDS} large tensors")
        header = fast_json.dumps(message.fields)
        body = b"".join([_LENGTH.pack(len(header)), header, *table, inline])
        if len(body) + 1 > MESSAGE_MAX_BYTES:
            descriptors.insert(0, _memfd_with(body, "thaw-message"))
            payload = b"F" + _LENGTH.pack(len(body))
        else:
            payload = b"I" + body
    except BaseException:
        for fd in descriptors:
            os.close(fd)
        raise
    return Encoded(payload, descriptors)


def decode(payload: bytes, fds: list[int]) -> Message:
    """The message of one datagram; takes ownership of `fds` (each is mapped or closed)."""
    try:
        return _parse(payload, fds)
    except BaseException:
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        raise


def bundleable(encoded: Encoded) -> bool:
    """Whether a message may travel in a bundle (inline, and small enough to share one)."""
    return not encoded.fds and len(encoded.payload) <= INLINE_MAX_BYTES


def bundle(messages: list[Encoded]) -> Encoded:
    """Bundleable messages as one datagram (one message stays as it is)."""
    if len(messages) == 1:
        return messages[0]
    parts = [b"B"]
    for encoded in messages:
        parts += [_LENGTH.pack(len(encoded.payload)), encoded.payload]
    return Encoded(b"".join(parts), [])


def decode_all(payload: bytes, fds: list[int]) -> list[Message]:
    """Every message of one datagram (a bundle holds several); takes ownership of `fds`."""
    if payload[:1] != b"B":
        return [decode(payload, fds)]
    for fd in fds:  # a bundle carries none
        os.close(fd)
    view, at, out = memoryview(payload), 1, []
    while at < len(view):
        (length,) = _LENGTH.unpack_from(view, at)
        at += 4
        if length < 1 or at + length > len(view) or view[at : at + 1] != b"I":
            raise ValueError("a bundle holds a truncated or non-inline message")
        out.append(_parse(bytes(view[at : at + length]), []))
        at += length
    return out


def _parse(payload: bytes, fds: list[int]) -> Message:
    kind = payload[:1]
    if kind == b"F":
        (size,) = _LENGTH.unpack_from(payload, 1)
        fd, fds[0] = fds[0], -1
        body: memoryview = _map(fd, size)
        fds = fds[1:]
    elif kind == b"I":
        body = memoryview(payload)[1:]
    else:
        raise ValueError(f"unknown message kind {kind!r}")
    (length,) = _LENGTH.unpack_from(body, 0)
    header = fast_json.loads(bytes(body[4 : 4 + length]))
    at = 4 + length
    (count,) = _COUNT.unpack_from(body, at)
    at += _COUNT.size
    places = []
    for _ in range(count):
        code, ndim, in_fd, name_length = _TENSOR.unpack_from(body, at)
        at += _TENSOR.size
        name = bytes(body[at : at + name_length]).decode()
        at += name_length
        shape = struct.unpack_from(f"<{ndim}q", body, at)
        at += 8 * ndim
        offset, nbytes = _PLACE.unpack_from(body, at)
        at += _PLACE.size
        places.append((name, _DATATYPES[code], shape, bool(in_fd), offset, nbytes))
    inline = body[at:]
    tensors = []
    for name, datatype, shape, in_fd, offset, nbytes in places:
        if in_fd:
            fd, fds[offset] = fds[offset], -1
            raw = _map(fd, nbytes)
        else:
            if offset + nbytes > len(inline):
                raise ValueError(f"tensor {name!r} runs past the end of its message")
            raw = inline[offset : offset + nbytes]
        tensors.append(Tensor(name, datatype, shape, _array(datatype, shape, raw)))
    for fd in fds:
        if fd >= 0:
            os.close(fd)
    return Message(header, tensors)


def receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One datagram and its descriptors; ChannelClosed at the end of the stream (or a reset).
    On a non-blocking socket with nothing to read: BlockingIOError."""
    try:
        payload, fds, _flags, _addr = socket.recv_fds(sock, MESSAGE_MAX_BYTES, _MAX_FDS + 1)
    except (BlockingIOError, InterruptedError):
        raise
    except (ConnectionResetError, OSError) as exc:
        raise ChannelClosed(str(exc)) from exc
    if not payload:
        for fd in fds:
            os.close(fd)
        raise ChannelClosed("end of stream")
    return payload, list(fds)


def transmit(sock: socket.socket, encoded: Encoded) -> None:
    """Send one encoded message (the caller closes its descriptors). On a non-blocking socket
    whose buffer is full: BlockingIOError; ChannelClosed if the peer is gone."""
    try:
        if encoded.fds:
            socket.send_fds(sock, [encoded.payload], encoded.fds)
        else:
            sock.send(encoded.payload)
    except (BlockingIOError, InterruptedError):
        raise
    except (BrokenPipeError, ConnectionResetError, OSError) as exc:
        raise ChannelClosed(str(exc)) from exc


class Channel:
    """One blocking end of the control channel; `send` is thread-safe, `recv` belongs to one
    reader at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._send_lock = threading.Lock()
        self._received: deque[Message] = deque()  # the rest of the last bundle (one reader)

    def fileno(self) -> int:
        return self._sock.fileno()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    def send(self, message: Message) -> None:
        """Send one message (large tensors through memfds); ChannelClosed if the peer is gone."""
        encoded = encode(message)
        try:
            with self._send_lock:
                transmit(self._sock, encoded)
        finally:
            encoded.close()

    def recv(self) -> Message:
        """The next message (blocking); ChannelClosed at the end of the stream."""
        if not self._received:
            self._received.extend(self.recv_all())
        return self._received.popleft()

    def recv_all(self) -> list[Message]:
        """Every message of the next datagram (blocking; ChannelClosed at the end)."""
        if self._received:
            out = list(self._received)
            self._received.clear()
            return out
        payload, fds = receive(self._sock)
        return decode_all(payload, fds)


def channel_pair() -> tuple[socket.socket, socket.socket]:
    """A connected (server, stub) socket pair; the stub's end is inheritable."""
    server, stub = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stub.set_inheritable(True)
    return server, stub
