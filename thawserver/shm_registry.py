"""The system shared-memory regions a server's clients registered, and reads and writes in them.

Triton's system shared-memory extension, with its texts (2.51's `shared_memory_manager.cc`): a
client creates a POSIX shared-memory object (`shm_open(key)`, a file in /dev/shm), registers
`byte_size` bytes of it at `offset` under a name, and then names that region in its tensors'
parameters (thawwire.shm_params). Used by `thaw serve` for its own clients and by `thaw up`,
which owns the regions of the clients it fronts (replicas come and go).

Safety, since everything about a registration is the client's to choose:
- a key names one object directly in the shm directory ("/name" or "name"): no other '/',
  no "." or "..", no NUL; the object is opened with O_NOFOLLOW and must be a regular file;
- `offset + byte_size` must lie inside the object when it is registered, and every access
  inside the region; every access is checked again against the object's size now, so a
  client that truncates its object gets a refusal, not a fault;
- the bytes move with `pread`/`pwrite` on the region's descriptor instead of through a
  mapping: an object shrunk between the check and the copy then yields a short read (a
  refusal), where a mapping would take SIGBUS and the server with it;
- at most `max_regions` regions (one descriptor each); unregister closes the descriptor;
  a region an inference holds (a `Lease`) is not unregistered (Triton's "in use").
Thread-safe: a lock guards the table; reads and writes of one lease happen outside it.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thawwire.errors import ErrorKind, SharedMemoryError
from thawwire.shm_params import ShmRef

__all__ = ["DEFAULT_MAX_REGIONS", "SHM_DIR", "Lease", "SystemSharedMemory"]

logger = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")
DEFAULT_MAX_REGIONS = 1024
_MAX_NAME = 255  # NAME_MAX: a region name and a key's object name alike


@dataclass(slots=True)
class _Region:
    name: str
    key: str
    offset: int
    byte_size: int
    fd: int
    in_use: int = 0

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset,
                "byte_size": self.byte_size}  # fmt: skip


@dataclass(slots=True)
class Lease:
    """`byte_size` bytes at `start` of a region's object, held for one inference: while a
    lease is out its region is "in use" and stays registered. Release it exactly once."""

    region: str
    start: int  # absolute offset in the object
    byte_size: int
    _fd: int
    _owner: SystemSharedMemory = field(repr=False)
    _released: bool = False

    def read(self) -> bytes:
        """The lease's bytes (a copy: the client may overwrite its region at any time)."""
        data = _pread_all(self._fd, self.byte_size, self.start)
        if len(data) != self.byte_size:
            raise _object_shrank(self.region)
        return data

    def write(self, data: bytes | memoryview, *, output: str) -> None:
        """Write an output's bytes at the start of the lease (Triton's text when they do not
        fit); the object must still hold the whole lease."""
        if len(data) > self.byte_size:
            raise SharedMemoryError(
                f"shared memory size specified with the request for output '{output}' "
                f"({self.byte_size} bytes) should be at least {len(data)} bytes to hold the "
                "results",
                ErrorKind.INVALID_ARG,
            )
        if os.fstat(self._fd).st_size < self.start + self.byte_size:
            raise _object_shrank(self.region)
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.pwrite(self._fd, view[done:], self.start + done)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._owner._release(self.region)


class SystemSharedMemory:
    """The registered regions of one server, by name (Triton's one namespace)."""

    def __init__(self, *, max_regions: int = DEFAULT_MAX_REGIONS, shm_dir: Path = SHM_DIR):
        self._max_regions = max_regions
        self._dir = shm_dir
        self._regions: dict[str, _Region] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._regions)

    # -- registration --------------------------------------------------------------------

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Register `byte_size` bytes at `offset` of the object `key` as region `name`."""
        if not name or len(name) > _MAX_NAME or "\0" in name:
            os.close(self._open(key))  # Triton opens the key first: its error comes first
            raise SharedMemoryError(
                f"invalid shared memory region name {name[:80]!r}: 1 to {_MAX_NAME} characters",
                ErrorKind.INVALID_ARG,
            )
        with self._lock:
            if name in self._regions:
                raise SharedMemoryError(
                    f"shared memory region '{name}' already in manager",
                    ErrorKind.ALREADY_EXISTS,
                )
            if len(self._regions) >= self._max_regions:
                raise SharedMemoryError(
                    f"failed to register shared memory region '{name}': {self._max_regions} "
                    "regions are registered already, the most this server holds",
                    ErrorKind.INVALID_ARG,
                )
            fd = self._open(key)
            try:
                size = os.fstat(fd).st_size
                if offset + byte_size > size:
                    raise SharedMemoryError(
                        f"failed to register shared memory region '{name}': invalid args",
                        ErrorKind.INVALID_ARG,
                    )
                if byte_size == 0:  # Triton's mmap of no bytes fails: its words (no space)
                    raise SharedMemoryError(
                        f"failed to register shared memory region '{name}': unable to process "
                        "address spaceInvalid argument",
                        ErrorKind.INVALID_ARG,
                    )
            except BaseException:
                os.close(fd)
                raise
            self._regions[name] = _Region(name, key, offset, byte_size, fd)
        logger.info(
            "shared memory region %r registered: key=%r offset=%d byte_size=%d",
            name, key, offset, byte_size,
        )  # fmt: skip

    def unregister(self, name: str) -> None:
        """Unregister region `name`; nothing to do when there is none (Triton's rule)."""
        with self._lock:
            region = self._regions.get(name)
            if region is None:
                return
            if region.in_use:
                raise SharedMemoryError(
                    f"Cannot unregister shared memory region '{name}', it is currently in use.",
                    ErrorKind.INTERNAL,
                )
            self._drop(region)

    def unregister_all(self) -> None:
        """Unregister every region not in use; the ones in use are named in the error."""
        with self._lock:
            busy = []
            for name in sorted(self._regions):
                region = self._regions[name]
                if region.in_use:
                    busy.append(name)
                else:
                    self._drop(region)
        if busy:
            raise SharedMemoryError(
                "Failed to unregister the following system shared memory regions: "
                + "".join(f"{name} ," for name in busy),
                ErrorKind.INTERNAL,
            )

    def status(self, name: str | None = None) -> list[dict[str, Any]]:
        """Triton's status rows (`name`, `key`, `offset`, `byte_size`), by name; one region's
        when `name` is given."""
        with self._lock:
            if name is None:
                return [self._regions[n].status() for n in sorted(self._regions)]
            region = self._regions.get(name)
            if region is None:
                raise SharedMemoryError(
                    f"Unable to find system shared memory region: '{name}'", ErrorKind.NOT_FOUND
                )
            return [region.status()]

    def close(self) -> None:
        """Close every region's descriptor (the server is stopping)."""
        with self._lock:
            for region in list(self._regions.values()):
                self._drop(region)

    # -- access --------------------------------------------------------------------------

    def lease(self, ref: ShmRef) -> Lease:
        """Hold `ref`'s bytes for one inference (Triton's bounds checks and texts)."""
        with self._lock:
            region = self._regions.get(ref.region)
            if region is None:
                raise SharedMemoryError(
                    f"Unable to find shared memory region: '{ref.region}'", ErrorKind.NOT_FOUND
                )
            if ref.offset >= region.byte_size:
                raise SharedMemoryError(
                    f"Invalid offset for shared memory region: '{ref.region}'",
                    ErrorKind.INVALID_ARG,
                )
            if ref.offset + ref.byte_size > region.byte_size:
                raise SharedMemoryError(
                    f"Invalid offset + byte size for shared memory region: '{ref.region}'",
                    ErrorKind.INVALID_ARG,
                )
            region.in_use += 1
            start = region.offset + ref.offset
            return Lease(ref.region, start, ref.byte_size, region.fd, self)

    def _release(self, name: str) -> None:
        with self._lock:
            region = self._regions.get(name)
            if region is not None and region.in_use:
                region.in_use -= 1

    # -- the objects ---------------------------------------------------------------------

    def _open(self, key: str) -> int:
        """The object `key` names, opened read-write (never a link, never outside the dir)."""
        name = key[1:] if key.startswith("/") else key
        if not name or len(name) > _MAX_NAME or "/" in name or "\0" in name or name in (".", ".."):
            raise SharedMemoryError(
                f"Unable to open shared memory region: '{key[:300]}' (a key names one object "
                f"in {self._dir}: '/name')",
                ErrorKind.INTERNAL,  # Triton's code when shm_open fails, whatever the reason
            )
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(self._dir / name, flags)
        except OSError as exc:
            reason = "it does not exist" if exc.errno == errno.ENOENT else exc.strerror
            raise SharedMemoryError(
                f"Unable to open shared memory region: '{key}' ({reason})", ErrorKind.INTERNAL
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise SharedMemoryError(
                f"Unable to open shared memory region: '{key}' (not a shared memory object)",
                ErrorKind.INVALID_ARG,
            )
        return fd

    def _drop(self, region: _Region) -> None:
        # Called with the lock held.
        del self._regions[region.name]
        os.close(region.fd)
        logger.info("shared memory region %r unregistered", region.name)


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    """Up to `size` bytes at `offset` (fewer only at the object's end)."""
    first = os.pread(fd, size, offset)
    if len(first) == size or not first:
        return first
    parts = [first]
    done = len(first)
    while done < size:
        more = os.pread(fd, size - done, offset + done)
        if not more:
            break
        parts.append(more)
        done += len(more)
    return b"".join(parts)


def _object_shrank(region: str) -> SharedMemoryError:
    return SharedMemoryError(
        f"shared memory region '{region}' no longer holds its registered bytes (its object "
        "was truncated)",
        ErrorKind.INVALID_ARG,
    )
