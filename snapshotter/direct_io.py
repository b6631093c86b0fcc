"""O_DIRECT file I/O between page-aligned memory (the arena) and files, and page-cache probes.

Moving a file's bytes through the page cache costs CPU: a buffered read copies from the page
cache into the destination, a buffered write allocates page-cache pages and copies into them.
With `O_DIRECT` the device DMAs straight from or into the caller's memory instead, which on a
two-core machine leaves the cores to the work that needs them (hashing, the network, the
model). It applies only where the memory address, the file offset and the length are
multiples of `ALIGN`; `aligned_prefix` says how much of a transfer qualifies, the caller moves
the rest with ordinary I/O. Filesystems without O_DIRECT (tmpfs) make `open_direct` return
None, and the caller stays with ordinary I/O.

`cached_fraction` asks the kernel (`cachestat`, Linux >= 6.5) how much of a file range is in
the page cache, so a reader can keep buffered reads for warm files (a memcpy from the page
cache beats the device) and use O_DIRECT only for cold ones.
"""

from __future__ import annotations

import ctypes
import errno
import os

ALIGN = 4096
"""Alignment used for O_DIRECT (memory, offset, length): the largest logical block size."""

_SYS_CACHESTAT = 451  # the same number on every Linux architecture (new-style syscall table)


def address(view: memoryview) -> int | None:
    """The address of the first byte of `view`, or None for a read-only or empty view."""
    if len(view) == 0 or view.readonly:
        return None
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def aligned_prefix(view: memoryview, file_offset: int) -> int:
    """How many leading bytes of `view` can move with O_DIRECT to or from `file_offset`:
    0 unless both the memory and the offset are aligned, then `len(view)` rounded down."""
    if file_offset % ALIGN:
        return 0
    addr = address(view)
    if addr is None or addr % ALIGN:
        return 0
    return len(view) // ALIGN * ALIGN


def open_direct(path: os.PathLike[str] | str, flags: int) -> int | None:
    """`os.open(path, flags | O_DIRECT)`, or None where the platform or filesystem refuses
    (EINVAL on tmpfs) or the open fails otherwise: the caller's ordinary I/O on its own
    descriptor then reports any real error."""
    direct = getattr(os, "O_DIRECT", 0)
    if not direct:
        return None
    try:
        return os.open(path, flags | direct | os.O_CLOEXEC)
    except OSError:
        return None


class _CachestatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Cachestat(ctypes.Structure):
    _fields_ = [
        ("nr_cache", ctypes.c_uint64),
        ("nr_dirty", ctypes.c_uint64),
        ("nr_writeback", ctypes.c_uint64),
        ("nr_evicted", ctypes.c_uint64),
        ("nr_recently_evicted", ctypes.c_uint64),
    ]


_libc: ctypes.CDLL | None = None
_cachestat_works = True


def cached_fraction(fd: int, offset: int, nbytes: int) -> float | None:
    """The fraction of `[offset, offset + nbytes)` of `fd` resident in the page cache, or None
    when the kernel cannot tell (no `cachestat`: Linux < 6.5, another OS, a seccomp filter)."""
    global _libc, _cachestat_works
    if not _cachestat_works or nbytes <= 0:
        return None
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            _cachestat_works = False
            return None
    page = os.sysconf("SC_PAGE_SIZE")
    first, last = offset // page, (offset + nbytes + page - 1) // page
    rng, out = _CachestatRange(first * page, (last - first) * page), _Cachestat()
    if (
        _libc.syscall(
            ctypes.c_long(_SYS_CACHESTAT),
            ctypes.c_long(fd),
            ctypes.byref(rng),
            ctypes.byref(out),
            ctypes.c_ulong(0),
        )
        != 0
    ):
        if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM):
            _cachestat_works = False
        return None
    return min(1.0, out.nr_cache / (last - first))
