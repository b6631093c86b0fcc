"""The control channel between the server and a stub process, and how tensors cross it.

One `AF_UNIX` `SOCK_SEQPACKET` socket pair per stub: each send is one message, delivered whole
and in order, with any file descriptors it carries. A message is a JSON header (the op's fields
and a table of its tensors), then the small tensors' bytes. A tensor that would take the inline
bytes past `INLINE_MAX_BYTES` never crosses the socket: it is written once into its own memfd
(shared memory), whose descriptor rides with the message; the receiver maps it and reads the
array in place (zero-copy; the mapping lives as long as the array). Inline tensors are read in
place too, from the datagram's bytes. Nothing is pickled. A message whose header and inline
bytes would exceed `MESSAGE_MAX_BYTES` is itself sent through a memfd.

    message := kind(1) ‖ json_length(u32 LE) ‖ json ‖ inline bytes                 kind b"I"
             | kind(1)   and fd[0] holds the rest                                  kind b"F"
             | kind(1) ‖ (length(u32 LE) ‖ message of kind b"I")*                  kind b"B"
    json    := [fields, [tensor*]]
    tensor  := [name, datatype, [dims], in_fd (0|1), at (the inline offset, or the index of
               its fd), nbytes]

The tensor table rides in the same JSON as the fields: one orjson call writes (or reads) the
whole header, several times faster than packing each tensor's description with struct (a tiny
model's messages are mostly those descriptions), and each array is one `np.ndarray` over the
received bytes. (Without orjson, as in a stub under an `EXECUTION_ENV_PATH` that lacks it, the
stdlib's json reads the same text, only slower.)

A bundle (kind b"B") carries several small messages that were ready at once in one datagram:
one send and one wake-up of the reader for all of them (the executes the server sends in one
turn of its loop). Messages with descriptors are never bundled; order is kept. A stub sends
each answer at once, never held for company: if its next execute kills the process, the
answers before it must already be with the server.
"""

from __future__ import annotations

import array
import contextlib
import math
import mmap
import os
import socket
import struct
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime.python import pb_utils
from thawserver import fast_json  # stdlib json, or orjson where the environment has it

__all__ = [
    "INLINE_MAX_BYTES",
    "Channel",
    "ChannelClosed",
    "ChannelReset",
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
# From the dtype's string, which numpy normalizes: native `int32` on a little-endian host (as
# Triton hands a model its arrays), where `newbyteorder("<")` alone would keep an explicit '<'.
_WIRE = {name: np.dtype(dtype.newbyteorder("<").str) for dtype, name in _V2.items()}
_WIRE["BF16"] = np.dtype("<u2")


def v2_datatype(dtype: np.dtype) -> str:
    """The v2 datatype of an array's dtype (str, bytes and objects: BYTES)."""
    found = _V2.get(dtype)  # an array's dtype: found as it is (no np.dtype() around it)
    if found is None:
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
_INLINE = ord("I")
_ANCILLARY_BYTES = socket.CMSG_SPACE(4 * (_MAX_FDS + 1))  # room for every descriptor sent

# What tensors are read from in place: a datagram's bytes, or a memfd's mapping.
Buffer = bytes | bytearray | memoryview


class ChannelClosed(Exception):
    """The other side of the channel is gone (exited, crashed, or closed it)."""


class ChannelReset(ChannelClosed):
    """The other side went with messages of ours unread. Linux reports that first, before the
    messages it wrote before it went: they are still there to read (then the end of stream)."""


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


def _bytes_items(tensor: Tensor) -> bytes:
    """A BYTES tensor serialized as Triton's length-prefixed items."""
    encoded = pb_utils.serialize_byte_tensor(np.asarray(tensor.data, dtype=np.object_))
    return encoded if isinstance(encoded, bytes) else b""  # () for an empty tensor


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


def _array(datatype: str, shape: tuple[int, ...], buf: Buffer, at: int, nbytes: int) -> np.ndarray:
    """The array `nbytes` at `at` of `buf` hold, in place (read-only when `buf` is bytes)."""
    if datatype == "BYTES":
        return _deserialize_bytes(memoryview(buf)[at : at + nbytes], shape)
    dtype = _WIRE[datatype]
    if math.prod(shape) * dtype.itemsize != nbytes:
        raise ValueError(f"{nbytes} bytes do not hold a {datatype} tensor of shape {list(shape)}")
    return np.ndarray(shape, dtype, buf, at)


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
        table: list[list[Any]] = []
        parts: list[bytes | memoryview] = []
        inline = 0
        for tensor in message.tensors:
            datatype = tensor.datatype
            if datatype == "BYTES":
                raw: bytes | memoryview = _bytes_items(tensor)
            else:  # no copy yet: the array itself, if it already is in its wire dtype
                values = tensor.data
                wire = _WIRE[datatype]
                if type(values) is not np.ndarray or values.dtype != wire:
                    values = np.asarray(values, dtype=wire)
                if inline + values.nbytes <= INLINE_MAX_BYTES:
                    raw = values.tobytes()  # the one copy, in C order
                else:
                    raw = memoryview(np.ascontiguousarray(values).reshape(-1).view(np.uint8).data)
            if inline + len(raw) <= INLINE_MAX_BYTES:
                table.append([tensor.name, datatype, tensor.shape, 0, inline, len(raw)])
                parts.append(raw)
                inline += len(raw)
            else:
                table.append([tensor.name, datatype, tensor.shape, 1, len(descriptors), len(raw)])
                descriptors.append(_memfd_with(raw, "thaw-tensor"))
        if len(descriptors) > _MAX_FDS:
            raise ValueError(f"a message can carry at most {_MAX_FDS} large tensors")
        header = _header(message.fields, table)
        payload = b"".join([b"I", _LENGTH.pack(len(header)), header, *parts])
        if len(payload) > MESSAGE_MAX_BYTES:
            descriptors.insert(0, _memfd_with(memoryview(payload)[1:], "thaw-message"))
            payload = b"F" + _LENGTH.pack(len(payload) - 1)
    except BaseException:
        for fd in descriptors:
            os.close(fd)
        raise
    return Encoded(payload, descriptors)


def _header(fields: dict[str, Any], table: list[list[Any]]) -> bytes:
    try:
        return fast_json.dumps([fields, table])
    except TypeError:  # maybe a shape of numpy integers (a backend's): plain ints, and again
        for entry in table:
            entry[2] = [int(dim) for dim in entry[2]]
        return fast_json.dumps([fields, table])


def decode(payload: bytes | bytearray, fds: list[int]) -> Message:
    """The message of one datagram; takes ownership of `fds` (each is mapped or closed)."""
    try:
        kind = payload[:1]
        if kind == b"F":
            if not fds:
                raise ValueError("a message in a memfd came without its memfd")
            (size,) = _LENGTH.unpack_from(payload, 1)
            fd, fds[0] = fds[0], -1
            body = _map(fd, size)
            message = _parse(body, 0, len(body), fds, 1)
        elif kind == b"I":
            message = _parse(payload, 1, len(payload), fds, 0)
        else:
            raise ValueError(f"unknown message kind {kind!r}")
    finally:  # mapped ones are -1; the rest (unclaimed, or after an error) are closed
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
    return message


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


def decode_all(payload: bytes | bytearray, fds: list[int]) -> list[Message]:
    """Every message of one datagram (a bundle holds several); takes ownership of `fds`."""
    if payload[:1] != b"B":
        return [decode(payload, fds)]
    for fd in fds:  # a bundle carries none
        os.close(fd)
    at, out = 1, []
    while at < len(payload):
        (length,) = _LENGTH.unpack_from(payload, at)
        at += 4
        if length < 1 or at + length > len(payload) or payload[at] != _INLINE:
            raise ValueError("a bundle holds a truncated or non-inline message")
        out.append(_parse(payload, at + 1, at + length, [], 0))  # read in place
        at += length
    return out


def _parse(buf: Buffer, start: int, end: int, fds: list[int], first_fd: int) -> Message:
    """The message whose body is `buf[start:end]`; its tensor `i` in a memfd is
    `fds[first_fd + i]`, taken (set to -1) once mapped."""
    (length,) = _LENGTH.unpack_from(buf, start)
    at = start + 4 + length
    if at > end:
        raise ValueError("a message's header runs past its end")
    fields, table = fast_json.loads(bytes(buf[start + 4 : at]))
    tensors = []
    for name, datatype, dims, in_fd, place, nbytes in table:
        shape = tuple(dims)
        if in_fd:
            index = first_fd + place
            if not 0 <= index < len(fds) or fds[index] < 0:
                raise ValueError(f"tensor {name!r} names a memfd the message does not carry")
            fd, fds[index] = fds[index], -1
            data = _array(datatype, shape, _map(fd, nbytes), 0, nbytes)
        else:
            if place < 0 or nbytes < 0 or at + place + nbytes > end:
                raise ValueError(f"tensor {name!r} runs past the end of its message")
            data = _array(datatype, shape, buf, at + place, nbytes)
        tensors.append(Tensor(name, datatype, shape, data))
    return Message(fields, tensors)


def receive(
    sock: socket.socket, buffer: bytearray | None = None, *, writable: bool = False
) -> tuple[bytes | bytearray, list[int]]:
    """One datagram and its descriptors, read through `buffer` (`MESSAGE_MAX_BYTES` long, the
    caller's, reused: no allocation of a full-size buffer per read); ChannelClosed at the end
    of the stream (or a reset). On a non-blocking socket with nothing to read: BlockingIOError.
    The datagram is a copy of its own; `writable` (the stub's side) makes it a bytearray, so
    the arrays decoded from it are writable, as a Triton model's input arrays are (a model may
    change its inputs in place); the server's side keeps bytes (~0.1 µs less a message)."""
    if buffer is None:
        buffer = bytearray(MESSAGE_MAX_BYTES)
    try:
        size, ancillary, _flags, _addr = sock.recvmsg_into([buffer], _ANCILLARY_BYTES)
    except (BlockingIOError, InterruptedError):
        raise
    except ConnectionResetError as exc:
        raise ChannelReset(str(exc)) from exc
    except OSError as exc:
        raise ChannelClosed(str(exc)) from exc
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if not size:
        for fd in fds:
            os.close(fd)
        raise ChannelClosed("end of stream")
    datagram = memoryview(buffer)[:size]
    return (bytearray(datagram) if writable else bytes(datagram)), fds.tolist()


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
        self._buffer = bytearray(MESSAGE_MAX_BYTES)  # the reader's (one at a time)

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
        payload, fds = receive(self._sock, self._buffer, writable=True)
        return decode_all(payload, fds)


def channel_pair() -> tuple[socket.socket, socket.socket]:
    """A connected (server, stub) socket pair; the stub's end is inheritable."""
    server, stub = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stub.set_inheritable(True)
    return server, stub
