"""The lines a local child process writes to a pipe, read for as long as it writes.

asyncio's `StreamReader.readline` raises ValueError for a line longer than the reader's limit
(64 KiB for a spawned child, 1 MiB for a forked one), after dropping what it held: a reader
that stops there leaves the pipe unread, and the child blocks on its next write once the pipe
is full: a replica whose Python model logged one large message (an array, a prompt) stopped
answering. `lines` yields such a line cut to the limit, marked, and goes on at the next one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

__all__ = ["CUT_MARK", "HEAD_BYTES", "lines"]

CUT_MARK = b" [cut: the line was longer than the reader's limit]\n"
# The most of an overlong line kept (a log record of that size is still read whole by a person).
HEAD_BYTES = 64 * 1024


async def lines(stream: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """Each line of `stream` (its newline kept) until its end; a line longer than the reader's
    limit as the first of its bytes the reader held (at most HEAD_BYTES) and CUT_MARK, the rest
    of it skipped."""
    while True:
        try:
            yield await stream.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:  # the end: a last line without a newline
            if exc.partial:
                yield exc.partial
            return
        except asyncio.LimitOverrunError as exc:
            head = await stream.read(min(exc.consumed, HEAD_BYTES))
            yield head + CUT_MARK
            if not await _skip_line(stream):
                return


async def _skip_line(stream: asyncio.StreamReader) -> bool:
    """Read past the rest of a line; False at the stream's end."""
    while True:
        try:
            await stream.readuntil(b"\n")
            return True
        except asyncio.IncompleteReadError:
            return False
        except asyncio.LimitOverrunError as exc:
            await stream.read(exc.consumed)
